package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/limiter"
)

// Reasons of the refusals for Limits, all RESOURCE_EXHAUSTED.
const (
	// ReasonTooManyPools: CreatePool would pass Limits.MaxPools.
	ReasonTooManyPools limiter.Reason = "TOO_MANY_POOLS"
	// ReasonTooManyWaiters: the server has Limits.MaxWaiters acquires and
	// takes in progress.
	ReasonTooManyWaiters limiter.Reason = "TOO_MANY_WAITERS"
	// ReasonClientLeaseLimit: the client holds or is acquiring
	// Limits.MaxClientLeases leases.
	ReasonClientLeaseLimit limiter.Reason = "CLIENT_LEASE_LIMIT"
	// ReasonClientSessionLimit: the client has Limits.MaxClientSessions
	// Session streams open.
	ReasonClientSessionLimit limiter.Reason = "CLIENT_SESSION_LIMIT"
	// ReasonClientRateLimited: the client is over Limits.ClientRate.
	ReasonClientRateLimited limiter.Reason = "CLIENT_RATE_LIMITED"
)

// limitKind indexes the refusal counters of quotas, in the order of
// limitNames.
type limitKind int

const (
	limitPools limitKind = iota
	limitWaiters
	limitClientLeases
	limitClientSessions
	limitClientRate
	limitConns
	limitConnsPerIP
	limitTakeWait
	numLimitKinds
)

// limitNames are the values of the "limit" label of
// tollgate_limit_refusals_total: the serve flags' names.
var limitNames = [numLimitKinds]string{"max-pools", "max-waiters", "max-client-leases", "max-client-sessions", "client-rate", "max-conns", "max-conns-per-ip", "max-take-wait"}

// maxEarlyEnds bounds quotas.early.
const maxEarlyEnds = 4096

// leaseRef names a lease on the server.
type leaseRef struct {
	pool  string
	token uint64
}

// quotas counts what clients hold, for Limits: acquires and takes in
// progress server-wide (an atomic counter), leases and acquires in
// progress per client, and Session streams per client.
type quotas struct {
	limits  Limits
	waiters atomic.Int64
	refused [numLimitKinds]atomic.Int64

	mu       sync.Mutex
	clients  map[string]int64    // client key -> leases held + acquires in progress
	leases   map[leaseRef]string // live lease -> client key
	early    map[leaseRef]time.Time
	sessions map[string]int64 // client key -> open Session streams
	unread   map[string]*unreadCount
}

// unreadCount is the answers queued on the Session streams of one client,
// shared by those streams.
type unreadCount struct {
	atomic.Int64
	streams int
}

func newQuotas(l Limits) *quotas {
	return &quotas{
		limits:   l,
		clients:  make(map[string]int64),
		leases:   make(map[leaseRef]string),
		early:    make(map[leaseRef]time.Time),
		sessions: make(map[string]int64),
		unread:   make(map[string]*unreadCount),
	}
}

// exhausted returns a RESOURCE_EXHAUSTED error of reason and counts it.
func (q *quotas) exhausted(kind limitKind, reason limiter.Reason, format string, args ...any) *limiter.Error {
	q.refused[kind].Add(1)
	return &limiter.Error{Code: limiter.CodeResourceExhausted, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// beginWait counts an acquire or take in progress, or refuses it past
// Limits.MaxWaiters. Each successful call must be matched by endWait.
func (q *quotas) beginWait() error {
	n := q.waiters.Add(1)
	if max := q.limits.MaxWaiters; max > 0 && n > max {
		q.waiters.Add(-1)
		return q.exhausted(limitWaiters, ReasonTooManyWaiters,
			"the server has %d acquires and takes in progress, its limit; retry later with backoff, or ask the operator to raise --max-waiters", max)
	}
	return nil
}

func (q *quotas) endWait() { q.waiters.Add(-1) }

// beginAcquire counts an acquire (or take) in progress against client key, or
// refuses it past Limits.MaxClientLeases. Each successful call must be
// matched by endAcquire.
func (q *quotas) beginAcquire(key string) error {
	max := q.limits.MaxClientLeases
	q.mu.Lock()
	n := q.clients[key]
	if max > 0 && n >= max {
		q.mu.Unlock()
		return q.exhausted(limitClientLeases, ReasonClientLeaseLimit,
			"%s already holds, or is acquiring or taking, %d leases and takes, the most one client may; release some or let takes finish first, or ask the operator to raise --max-client-leases", auth.DescribeKey(key), max)
	}
	q.clients[key] = n + 1
	q.mu.Unlock()
	return nil
}

// endAcquire ends an acquire counted by beginAcquire: a granted lease keeps
// counting until it ends (leaseEnded); an acquire that failed stops
// counting.
func (q *quotas) endAcquire(key string, lease *limiter.Lease) {
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

// track starts counting the live lease ref against the client key()
// names, unless it is counted already: a lease re-adopted after a restart
// counts toward its client's limit like a granted one. It never refuses:
// the lease exists. key is called only when the lease is new to q.
func (q *quotas) track(ref leaseRef, key func() string) {
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

// leaseEnded stops counting a lease that was released, expired or ended
// with its pool.
func (q *quotas) leaseEnded(pool string, token uint64) {
	ref := leaseRef{pool, token}
	q.mu.Lock()
	defer q.mu.Unlock()
	if key, ok := q.leases[ref]; ok {
		delete(q.leases, ref)
		q.decLocked(q.clients, key)
		return
	}
	// Either a lease granted but not yet recorded by endAcquire, or one
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

// openSession counts a Session stream of client key, or refuses it past
// Limits.MaxClientSessions. Each successful call must be matched by
// closeSession.
func (q *quotas) openSession(key string) error {
	max := q.limits.MaxClientSessions
	q.mu.Lock()
	n := q.sessions[key]
	if max > 0 && n >= max {
		q.mu.Unlock()
		return q.exhausted(limitClientSessions, ReasonClientSessionLimit,
			"%s already has %d Session streams open, the most one client may; use one stream per process (the Go client does) and close the others, or ask the operator to raise --max-client-sessions", auth.DescribeKey(key), max)
	}
	q.sessions[key] = n + 1
	q.mu.Unlock()
	return nil
}

// unreadCounter returns the counter of answers queued for client key's
// Session streams; each call must be matched by dropUnreadCounter.
func (q *quotas) unreadCounter(key string) *atomic.Int64 {
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

func (q *quotas) dropUnreadCounter(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.unread[key]; c != nil {
		if c.streams--; c.streams == 0 {
			delete(q.unread, key)
		}
	}
}

func (q *quotas) closeSession(key string) {
	q.mu.Lock()
	q.decLocked(q.sessions, key)
	q.mu.Unlock()
}

// decLocked decrements m[key], deleting it at zero so that memory follows
// the clients that hold something.
func (q *quotas) decLocked(m map[string]int64, key string) {
	if n := m[key] - 1; n > 0 {
		m[key] = n
	} else {
		delete(m, key)
	}
}

// clientLeases returns what client key holds and is acquiring, for tests.
func (q *quotas) clientLeases(key string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.clients[key]
}
