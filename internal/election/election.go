// Package election elects one leader among the Tollgate servers of a
// cluster through etcd, and keeps a leadership deadline so that a leader
// stops acting before etcd could let anyone else lead.
//
// Each server holds one etcd lease (its session), kept alive by this
// package itself: a KeepAliveOnce every TTL/3, whose send time it notes.
// It campaigns by putting the key PREFIX + hex(lease id), with its
// advertised address as value, attached to that lease. The leader is the
// key with the lowest create revision; its create revision is the epoch.
//
// A server leads while (a) a linearizable read has shown that the first
// key is its own, attached to its lease, and (b) its leadership deadline
// is ahead. The deadline is sent + TTL − margin on the monotonic clock,
// where sent is the send time of the last keep-alive etcd answered. etcd
// expires the lease no earlier than TTL after it received that keep-alive,
// which is after it was sent; so while clock rates differ by less than
// margin/TTL, the old leader has stopped before etcd deletes its key and
// a successor can win. One failed keep-alive does not end leadership: the
// next, a third of a TTL later, can still renew the deadline.
//
// Each unbroken leadership is a Tenure: it ends for good at its deadline
// (whoever looks first: Tenure.Live reads the monotonic clock itself, and
// a timer ends it at the deadline and tells Config.Ended), when a read
// shows another key first, when the session is lost, or at Close. A
// keep-alive answered after the deadline does not revive it: it starts a
// new Tenure.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Config configures an Election.
type Config struct {
	// Client is the etcd client; the Election does not close it.
	Client *clientv3.Client
	// Prefix is the campaign keys' prefix, e.g. "/tollgate/election/".
	Prefix string
	// Advertise is this server's address for clients, the value of its key.
	Advertise string
	// TTL is the session's etcd lease TTL (whole seconds, at least 1 s).
	TTL time.Duration
	// Margin is taken off the deadline; 0 means TTL/4.
	Margin time.Duration
	// Logger receives the election's logs; nil discards them.
	Logger *slog.Logger
	// Ended, when set, is called when a Tenure ends, by the goroutine
	// that ended it (at the deadline, the deadline's timer), with no lock
	// of the Election held. It must not block.
	Ended func(*Tenure)

	// keepAlive replaces Client.KeepAliveOnce in tests.
	keepAlive func(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

// View is the cluster as this server last read it.
type View struct {
	// Members are the campaigning servers' addresses, the leader first.
	Members []string
	// Leader is the leader's address; "" when none is known.
	Leader string
	// Epoch is the leader key's create revision; 0 when none is known.
	Epoch int64
}

// Election is one server's campaign. Create it with Start; Close or
// Resign it.
type Election struct {
	cfg    Config
	log    *slog.Logger
	margin time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	lease    clientv3.LeaseID // 0 while none is held
	key      string           // our campaign key under lease; "" while none
	deadline time.Time        // monotonic; zero when none
	first    bool             // the last read showed our key first
	view     View
	changed  chan struct{} // closed and replaced on every change
	timer    *time.Timer   // fires at the deadline
	tenure   *Tenure       // the leadership now; nil while not leading
}

// Tenure is one unbroken leadership of this server, under one campaign
// key and epoch. It ends once, for good.
type Tenure struct {
	// Key is this server's campaign key; Epoch its create revision.
	Key   string
	Epoch int64

	base     time.Time    // origin of deadline, with a monotonic reading
	deadline atomic.Int64 // since base; moved only while the tenure is live
	ended    atomic.Bool
	done     chan struct{}
}

// Live reports whether the tenure goes on: it has not ended and its
// deadline, by the monotonic clock, is ahead. Once false, always false:
// the caller that sees the deadline passed ends the tenure.
func (t *Tenure) Live() bool {
	if t == nil || t.ended.Load() {
		return false
	}
	if time.Since(t.base) < time.Duration(t.deadline.Load()) {
		return true
	}
	t.ended.Store(true)
	return false
}

// Done is closed when the tenure is seen to end (by the deadline's timer
// at the latest).
func (t *Tenure) Done() <-chan struct{} { return t.done }

// Deadline is the tenure's leadership deadline.
func (t *Tenure) Deadline() time.Time { return t.base.Add(time.Duration(t.deadline.Load())) }

// Start starts campaigning; it returns at once. The campaign goes on,
// through etcd failures, until Close or Resign.
func Start(cfg Config) (*Election, error) {
	if cfg.Client == nil || cfg.Prefix == "" || cfg.Advertise == "" {
		return nil, errors.New("election: Client, Prefix and Advertise are required")
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("election: the session TTL is %v; it must be at least 1s", cfg.TTL)
	}
	if cfg.TTL%time.Second != 0 {
		return nil, fmt.Errorf("election: the session TTL is %v; etcd takes whole seconds", cfg.TTL)
	}
	margin := cfg.Margin
	if margin == 0 {
		margin = cfg.TTL / 4
	}
	if margin <= 0 || margin >= cfg.TTL*2/3 {
		return nil, fmt.Errorf("election: the margin %v must be above 0 and below two thirds of the TTL %v", margin, cfg.TTL)
	}
	if cfg.keepAlive == nil {
		cfg.keepAlive = cfg.Client.KeepAliveOnce
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Election{cfg: cfg, log: log, margin: margin, ctx: ctx, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go e.run()
	return e, nil
}

// Leading reports whether this server leads now: its key is first and its
// deadline is ahead, in one unbroken tenure.
func (e *Election) Leading() bool { return e.Tenure() != nil }

func (e *Election) leadingLocked(now time.Time) bool {
	return e.first && now.Before(e.deadline)
}

// Tenure returns the leadership now, or nil while this server does not
// lead.
func (e *Election) Tenure() *Tenure {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.tenure.Live() {
		return nil
	}
	return e.tenure
}

// settleLocked makes the tenure match the state: it ends the tenure when
// this server does not lead now (or leads under another key or epoch),
// and starts one when it leads and has none. It returns the tenure it
// ended, if any, for ended.
func (e *Election) settleLocked(now time.Time) *Tenure {
	var gone *Tenure
	if t := e.tenure; t != nil && (!t.Live() || !e.leadingLocked(now) || t.Key != e.key || t.Epoch != e.view.Epoch) {
		t.ended.Store(true)
		close(t.done)
		e.tenure, gone = nil, t
		e.notifyLocked()
	}
	if e.tenure == nil && e.leadingLocked(now) {
		t := &Tenure{Key: e.key, Epoch: e.view.Epoch, base: now, done: make(chan struct{})}
		t.deadline.Store(int64(e.deadline.Sub(now)))
		e.tenure = t
	}
	return gone
}

// ended tells Config.Ended of a tenure that ended; call it without e.mu.
func (e *Election) ended(t *Tenure) {
	if t != nil && e.cfg.Ended != nil {
		e.cfg.Ended(t)
	}
}

// Remaining is the time left on the leadership deadline; 0 when not
// leading.
func (e *Election) Remaining() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if !e.leadingLocked(now) {
		return 0
	}
	return e.deadline.Sub(now)
}

// View returns the cluster as last read.
func (e *Election) View() View {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.view
	v.Members = append([]string(nil), v.Members...)
	return v
}

// Term returns this server's campaign key and the epoch while it leads.
func (e *Election) Term() (key string, epoch int64, ok bool) {
	t := e.Tenure()
	if t == nil {
		return "", 0, false
	}
	return t.Key, t.Epoch, true
}

// Changed returns a channel closed at the next change of leadership, view
// or deadline expiry.
func (e *Election) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// notifyLocked wakes those waiting on Changed.
func (e *Election) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// Close stops campaigning without resigning: the key stays until etcd
// expires the session, as if the process had died. Leading is false after.
func (e *Election) Close() {
	e.cancel()
	<-e.done
	e.mu.Lock()
	e.first, e.deadline = false, time.Time{}
	if e.timer != nil {
		e.timer.Stop()
	}
	gone := e.settleLocked(time.Now())
	e.notifyLocked()
	e.mu.Unlock()
	e.ended(gone)
}

// Resign stops campaigning and revokes the session, deleting its key at
// once so that another server can lead without waiting for the TTL.
func (e *Election) Resign(ctx context.Context) error {
	e.Close()
	e.mu.Lock()
	id := e.lease
	e.lease, e.key = 0, ""
	e.mu.Unlock()
	if id == 0 {
		return nil
	}
	_, err := e.cfg.Client.Revoke(ctx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("resigning (revoking the etcd session): %w", err)
	}
	return nil
}

// StepDown ends this server's leadership at once and gives up its
// session: it is no longer kept alive (its key goes when the revoke sent
// now gets through, or when etcd expires it), and the campaign goes on
// under a new session, whose key has a later create revision. A write
// fenced on the old key cannot succeed once that key is gone, and the new
// key leads only after it is gone.
func (e *Election) StepDown() {
	e.mu.Lock()
	id := e.lease
	e.lease, e.key, e.first, e.deadline = 0, "", false, time.Time{}
	gone := e.settleLocked(time.Now())
	e.notifyLocked()
	e.mu.Unlock()
	e.ended(gone)
	if id == 0 {
		return
	}
	e.log.Warn("stepping down: giving up the etcd session; campaigning again under a new one")
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, e.cfg.TTL)
		defer cancel()
		_, _ = e.cfg.Client.Revoke(ctx, id) // best effort: otherwise etcd expires it
	}()
}

// run keeps the session alive, campaigns and observes, until Close.
func (e *Election) run() {
	defer close(e.done)
	interval := e.cfg.TTL / 3
	events := e.watch()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	e.step(interval)
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
			if events == nil {
				events = e.watch()
			}
			e.step(interval)
		case _, ok := <-events:
			if !ok {
				events = nil // watched again at the next tick
			}
			e.observe(interval) // a key came or went: read again at once
		}
	}
}

// watch watches the campaign keys; the channel closes when the watch
// fails (it is then made again).
func (e *Election) watch() clientv3.WatchChan {
	return e.cfg.Client.Watch(clientv3.WithRequireLeader(e.ctx), e.cfg.Prefix, clientv3.WithPrefix())
}

// step renews (or starts) the session and campaigns, then observes.
func (e *Election) step(timeout time.Duration) {
	e.mu.Lock()
	id := e.lease
	e.mu.Unlock()
	if id == 0 {
		if err := e.newSession(timeout); err != nil {
			e.log.Warn("cannot start an etcd session; retrying", "err", err)
			return
		}
	} else if !e.keepAlive(id, timeout) {
		return
	}
	e.observe(timeout)
}

// newSession grants a lease and puts our campaign key on it.
func (e *Election) newSession(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	sent := time.Now()
	g, err := e.cfg.Client.Grant(ctx, int64(e.cfg.TTL/time.Second))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("%s%x", e.cfg.Prefix, int64(g.ID))
	_, err = e.cfg.Client.Put(ctx, key, e.cfg.Advertise, clientv3.WithLease(g.ID))
	if err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), timeout)
		_, _ = e.cfg.Client.Revoke(cctx, g.ID)
		ccancel()
		return err
	}
	e.mu.Lock()
	e.lease, e.key = g.ID, key
	gone := e.renewedLocked(sent, time.Duration(g.TTL)*time.Second)
	e.mu.Unlock()
	e.ended(gone)
	e.log.Info("campaigning for leadership", "key", key, "ttl", e.cfg.TTL)
	return nil
}

// keepAlive renews the session once and reports whether it did. When the
// session is gone, a new one is started at the next step.
func (e *Election) keepAlive(id clientv3.LeaseID, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	sent := time.Now()
	resp, err := e.cfg.keepAlive(ctx, id)
	var gone *Tenure
	defer func() { e.ended(gone) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.lease != id:
		return false // given up meanwhile (StepDown)
	case err == nil && resp.TTL > 0:
		gone = e.renewedLocked(sent, time.Duration(resp.TTL)*time.Second)
		return true
	case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
		e.log.Warn("the etcd session expired; leadership (if held) is lost, starting a new session")
		e.lease, e.key, e.first, e.deadline = 0, "", false, time.Time{}
		gone = e.settleLocked(time.Now())
		e.notifyLocked()
		return false
	default:
		// The deadline stands: the next keep-alive may still renew it.
		if e.ctx.Err() == nil {
			e.log.Warn("an etcd keep-alive failed; the session holds until its deadline", "err", err, "remaining", max(0, time.Until(e.deadline)))
		}
		return false
	}
}

// renewedLocked moves the deadline to sent + ttl − margin (ttl being the
// lower of the one etcd granted and the configured one) and re-arms the
// timer that ends the tenure when it passes. A tenure whose deadline has
// passed already ends first: it does not revive (a new one starts). It
// returns the tenure it ended, if any.
func (e *Election) renewedLocked(sent time.Time, ttl time.Duration) *Tenure {
	ttl = min(ttl, e.cfg.TTL)
	d := sent.Add(ttl - e.margin)
	if !d.After(e.deadline) {
		return nil
	}
	now := time.Now()
	gone := e.settleLocked(now) // ends a tenure whose deadline passed
	was := e.leadingLocked(now)
	e.deadline = d
	if t := e.tenure; t != nil {
		t.deadline.Store(int64(d.Sub(t.base)))
	}
	if ended := e.settleLocked(now); ended != nil {
		gone = ended
	}
	if !was && e.leadingLocked(now) {
		e.notifyLocked()
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.AfterFunc(time.Until(d), e.atDeadline)
	return gone
}

// atDeadline ends the tenure whose deadline has passed, at once, and
// tells Config.Ended.
func (e *Election) atDeadline() {
	e.mu.Lock()
	now := time.Now()
	if !e.first || now.Before(e.deadline) {
		e.mu.Unlock()
		return
	}
	e.log.Warn("leadership deadline passed without a renewed session; no longer leading")
	gone := e.settleLocked(now)
	e.notifyLocked()
	e.mu.Unlock()
	e.ended(gone)
}

// observe reads the campaign keys (a linearizable read) and updates the
// view and whether our key is first.
func (e *Election) observe(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	resp, err := e.cfg.Client.Get(ctx, e.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return // the deadline decides meanwhile
	}
	v := View{}
	for _, kv := range resp.Kvs {
		v.Members = append(v.Members, string(kv.Value))
	}
	e.mu.Lock()
	var gone *Tenure
	defer func() { e.ended(gone) }()
	defer e.mu.Unlock()
	first := false
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		v.Leader, v.Epoch = string(kv.Value), kv.CreateRevision
		first = e.lease != 0 && string(kv.Key) == e.key && clientv3.LeaseID(kv.Lease) == e.lease
	}
	was := e.leadingLocked(time.Now())
	old := e.view
	e.first, e.view = first, v
	gone = e.settleLocked(time.Now())
	if was != e.leadingLocked(time.Now()) || old.Leader != v.Leader || old.Epoch != v.Epoch || !slices.Equal(old.Members, v.Members) {
		e.notifyLocked()
	}
}

// DialOptions are the gRPC options an etcd client of a campaign needs:
// after etcd was unreachable, the client must reconnect within a fraction
// of the session TTL (gRPC's default backoff grows to two minutes), so
// that a live session is renewed before it expires.
func DialOptions(ttl time.Duration) []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ttl / 6},
		MinConnectTimeout: ttl / 6,
	})}
}
