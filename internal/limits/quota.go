package limits

import (
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Kind names a limit, to count its refusals; Names gives each its
// label.
type Kind int

const (
	KindPools Kind = iota
	KindWaiters
	KindClientLeases
	KindClientSessions
	KindClientRate
	KindConns
	KindConnsPerIP
	KindTakeWait
	KindHTTPConns
	KindHTTPConnsPerIP
	KindStreams
	KindStreamsPerIP
	numKinds
)

// Names are the values of the "limit" label of
// tollgate_limit_refusals_total: the serve flags' names.
var Names = [numKinds]string{"max-pools", "max-waiters", "max-client-leases", "max-client-sessions", "client-rate", "max-conns", "max-conns-per-ip", "max-take-wait", "http-max-conns", "http-max-conns-per-ip", "max-streams", "max-streams-per-ip"}

// maxEarlyEnds bounds Quotas.early.
const maxEarlyEnds = 4096

// leaseRef names a lease on the server.
type leaseRef struct {
	pool  string
	token uint64
}

// Quotas counts what clients hold, for Limits: acquires and takes in
// progress server-wide (an atomic counter), leases and acquires in
// progress per client, and Session streams per client; and it keeps each
// client's request rate.
type Quotas struct {
	limits  Limits
	rates   *Rates // nil: no request rate
	waiters atomic.Int64
	refused [numKinds]atomic.Int64

	mu        sync.Mutex
	clients   map[string]int64    // client key -> leases held + acquires in progress
	leases    map[leaseRef]string // live lease -> client key
	early     map[leaseRef]time.Time
	sessions  map[string]int64 // client key -> open streams
	ipStreams map[string]int64 // IP address -> open streams
	streams   int64
	unread    map[string]*unreadCount
}

// unreadCount is the answers queued on the Session streams of one client,
// shared by those streams.
type unreadCount struct {
	atomic.Int64
	streams int
}

// New returns the quotas that enforce l.
func New(l Limits) *Quotas {
	return &Quotas{
		limits:    l,
		rates:     NewRates(l.ClientRate, l.ClientBurst),
		clients:   make(map[string]int64),
		leases:    make(map[leaseRef]string),
		early:     make(map[leaseRef]time.Time),
		sessions:  make(map[string]int64),
		ipStreams: make(map[string]int64),
		unread:    make(map[string]*unreadCount),
	}
}

// Exhausted returns a RESOURCE_EXHAUSTED error of reason and counts it.
func (q *Quotas) Exhausted(kind Kind, reason apierr.Reason, format string, args ...any) *apierr.Error {
	q.refused[kind].Add(1)
	return &apierr.Error{Code: apierr.CodeResourceExhausted, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// RateLimited reports whether calls count against a request rate
// (Limits.ClientRate).
func (q *Quotas) RateLimited() bool { return q.rates != nil }

// AllowRate takes a request from client key's rate budget, or refuses it,
// to retry after a request's share of a second.
func (q *Quotas) AllowRate(key string) *apierr.Error { return q.AllowRateN(key, 1) }

// AllowRateN takes n requests from client key's rate budget, all or none,
// or refuses them as AllowRate does.
func (q *Quotas) AllowRateN(key string, n int) *apierr.Error {
	if q.rates.AllowN(key, n) {
		return nil
	}
	err := q.Exhausted(KindClientRate, apierr.ReasonClientRateLimited,
		"%s is over its request rate of %g per second (burst %d); slow down and retry with backoff, or ask the operator to raise --client-rate",
		auth.DescribeKey(key), q.limits.ClientRate, q.limits.ClientBurst)
	err.RetryAfter = max(time.Millisecond, time.Duration(float64(time.Second)/q.limits.ClientRate))
	return err
}

// SetRateClock makes the request rates read the time from now, for tests.
func (q *Quotas) SetRateClock(now func() time.Time) { q.rates.SetClock(now) }

// AdmitPool refuses a new pool past Limits.MaxPools when the server has n
// pools, and returns nil while it has room (or there is no limit).
func (q *Quotas) AdmitPool(n int) *apierr.Error {
	if max := q.limits.MaxPools; max > 0 && n >= max {
		return q.Exhausted(KindPools, apierr.ReasonTooManyPools,
			"the server has %d pools, its limit of %d; delete pools that are no longer used, or ask the operator to raise --max-pools", n, max)
	}
	return nil
}

// BeginWait counts an acquire or take in progress, or refuses it past
// Limits.MaxWaiters. Each successful call must be matched by EndWait.
func (q *Quotas) BeginWait() error {
	n := q.waiters.Add(1)
	if max := q.limits.MaxWaiters; max > 0 && n > max {
		q.waiters.Add(-1)
		return q.Exhausted(KindWaiters, apierr.ReasonTooManyWaiters,
			"the server has %d acquires and takes in progress, its limit; retry later with backoff, or ask the operator to raise --max-waiters", max)
	}
	return nil
}

// EndWait ends a wait counted by BeginWait.
func (q *Quotas) EndWait() { q.waiters.Add(-1) }

// BeginAcquire counts an acquire (or take) in progress against client key, or
// refuses it past Limits.MaxClientLeases. Each successful call must be
// matched by EndAcquire.
func (q *Quotas) BeginAcquire(key string) error {
	max := q.limits.MaxClientLeases
	q.mu.Lock()
	n := q.clients[key]
	if max > 0 && n >= max {
		q.mu.Unlock()
		return q.Exhausted(KindClientLeases, apierr.ReasonClientLeaseLimit,
			"%s already holds, or is acquiring or taking, %d leases and takes, the most one client may; release some or let takes finish first, or ask the operator to raise --max-client-leases", auth.DescribeKey(key), max)
	}
	q.clients[key] = n + 1
	q.mu.Unlock()
	return nil
}

// EndAcquire ends an acquire counted by BeginAcquire: a granted lease keeps
// counting until it ends (LeaseEnded); an acquire that failed stops
// counting.
func (q *Quotas) EndAcquire(key string, lease *limiter.Lease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if lease != nil {
		ref := leaseRef{lease.Pool, lease.FencingToken}
		if _, gone := q.early[ref]; !gone {
			q.leases[ref] = key
			return
		}
		delete(q.early, ref) // it ended before we could record it
	}
	q.decLocked(q.clients, key)
}

// Track starts counting the live lease token of pool against the client key()
// names, unless it is counted already: a lease re-adopted after a restart
// counts toward its client's limit like a granted one. It never refuses:
// the lease exists. key is called only when the lease is new to q.
func (q *Quotas) Track(pool string, token uint64, key func() string) {
	ref := leaseRef{pool, token}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.leases[ref]; ok {
		return
	}
	if _, gone := q.early[ref]; gone {
		return // it ended already
	}
	k := key()
	q.leases[ref] = k
	q.clients[k]++
}

// LeaseEnded stops counting a lease that was released, expired or ended
// with its pool.
func (q *Quotas) LeaseEnded(pool string, token uint64) {
	ref := leaseRef{pool, token}
	q.mu.Lock()
	defer q.mu.Unlock()
	if key, ok := q.leases[ref]; ok {
		delete(q.leases, ref)
		q.decLocked(q.clients, key)
		return
	}
	// Either a lease granted but not yet recorded by EndAcquire, or one
	// not counted at all (created without the server's acquire path).
	// Remember it briefly, within a bound.
	now := time.Now()
	if len(q.early) >= maxEarlyEnds {
		for r, t := range q.early {
			if now.Sub(t) > time.Minute {
				delete(q.early, r)
			}
		}
		if len(q.early) >= maxEarlyEnds {
			clear(q.early)
		}
	}
	q.early[ref] = now
}

// ForgetLeases stops counting every lease, keeping the acquires in
// progress: for a server of a cluster whose leadership term ended, with
// the engine that held them. Leases re-adopted in a later term are
// counted again (Track).
func (q *Quotas) ForgetLeases() { q.ForgetLeasesIn(nil) }

// ForgetLeasesIn is ForgetLeases for the leases of the pools in says
// (nil: every pool), as when the engine of some pools is gone (a server
// of a cluster ends its term of their shard).
func (q *Quotas) ForgetLeasesIn(in func(pool string) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for ref, key := range q.leases {
		if in == nil || in(ref.pool) {
			delete(q.leases, ref)
			q.decLocked(q.clients, key)
		}
	}
	for ref := range q.early {
		if in == nil || in(ref.pool) {
			delete(q.early, ref)
		}
	}
}

// OpenStream counts a stream (Session, health Watch, WatchEvents,
// reflection: every kind) of client key from IP address ip, or refuses it
// past Limits.MaxClientSessions, MaxStreamsPerIP or MaxStreams. Each
// successful call must be matched by CloseStream with the same arguments.
func (q *Quotas) OpenStream(key, ip string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, nip := q.sessions[key], q.ipStreams[ip]
	switch {
	case q.limits.MaxClientSessions > 0 && n >= q.limits.MaxClientSessions:
		return q.Exhausted(KindClientSessions, apierr.ReasonClientSessionLimit,
			"%s already has %d streams open (Session, health Watch, WatchEvents, reflection), the most one client may; use one Session stream per process (the Go client does) and close the others, or ask the operator to raise --max-client-sessions", auth.DescribeKey(key), q.limits.MaxClientSessions)
	case q.limits.MaxStreamsPerIP > 0 && nip >= int64(q.limits.MaxStreamsPerIP):
		return q.Exhausted(KindStreamsPerIP, apierr.ReasonClientSessionLimit,
			"address %s already has %d streams open, the most one address may; close streams it does not use, or ask the operator to raise --max-streams-per-ip", ip, q.limits.MaxStreamsPerIP)
	case q.limits.MaxStreams > 0 && q.streams >= int64(q.limits.MaxStreams):
		return q.Exhausted(KindStreams, apierr.ReasonClientSessionLimit,
			"the server has %d streams open, its limit; retry later with backoff, or ask the operator to raise --max-streams", q.limits.MaxStreams)
	}
	q.sessions[key] = n + 1
	q.ipStreams[ip] = nip + 1
	q.streams++
	return nil
}

// CloseStream ends a stream counted by OpenStream.
func (q *Quotas) CloseStream(key, ip string) {
	q.mu.Lock()
	q.decLocked(q.sessions, key)
	q.decLocked(q.ipStreams, ip)
	q.streams--
	q.mu.Unlock()
}

// UnreadCounter returns the counter of answers queued for client key's
// Session streams; each call must be matched by DropUnreadCounter.
func (q *Quotas) UnreadCounter(key string) *atomic.Int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.unread[key]
	if c == nil {
		c = new(unreadCount)
		q.unread[key] = c
	}
	c.streams++
	return &c.Int64
}

// DropUnreadCounter lets go of a counter UnreadCounter returned.
func (q *Quotas) DropUnreadCounter(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.unread[key]; c != nil {
		if c.streams--; c.streams == 0 {
			delete(q.unread, key)
		}
	}
}

// decLocked decrements m[key], deleting it at zero so that memory follows
// the clients that hold something.
func (q *Quotas) decLocked(m map[string]int64, key string) {
	if n := m[key] - 1; n > 0 {
		m[key] = n
	} else {
		delete(m, key)
	}
}

// ClientLeases returns what client key holds and is acquiring, for tests.
func (q *Quotas) ClientLeases(key string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.clients[key]
}

// Waiters returns the acquires and takes in progress server-wide.
func (q *Quotas) Waiters() int64 { return q.waiters.Load() }

// Refused returns how many calls or connections limit kind has refused.
func (q *Quotas) Refused(kind Kind) int64 { return q.refused[kind].Load() }

// Sessions returns the open Session streams by client key, for tests.
func (q *Quotas) Sessions() map[string]int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.sessions)
}

// Counted returns the leases and acquires counted by client key and the
// clients of the live leases counted, for tests.
func (q *Quotas) Counted() (clients map[string]int64, leases map[string]string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	leases = make(map[string]string, len(q.leases))
	for r, k := range q.leases {
		leases[r.pool+"/"+strconv.FormatUint(r.token, 10)] = k
	}
	return maps.Clone(q.clients), leases
}
