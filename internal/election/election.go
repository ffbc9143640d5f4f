// Package election elects, through etcd, one leader for each shard of a
// cluster of Tollgate servers, and keeps a leadership deadline so that a
// leader stops acting before etcd could let anyone else lead.
//
// Each server holds one etcd lease (its session), whatever the number of
// shards, kept alive by this package itself: a KeepAliveOnce every TTL/3,
// whose send time it notes. On that lease it puts its membership key,
// PREFIX/election/<lease hex>, and a campaign key for each shard it
// campaigns for, PREFIX/shards/<i>/<lease hex>; each key's value is the
// server's advertised address. A shard's leader is the shard's key with
// the lowest create revision; that create revision is the shard's epoch.
//
// A server leads a shard while (a) a linearizable read has shown that the
// shard's first key is its own, attached to its lease, and (b) its
// leadership deadline is ahead. The deadline is the session's, shared by
// every shard: sent + TTL − margin on the monotonic clock, where sent is
// the send time of the last keep-alive etcd answered. etcd expires the
// lease no earlier than TTL after it received that keep-alive, which is
// after it was sent; so while clock rates differ by less than margin/TTL,
// the old leader has stopped before etcd deletes its keys and a successor
// can win. One failed keep-alive does not end leadership: the next, a
// third of a TTL later, can still renew the deadline.
//
// Each unbroken leadership of a shard is a Tenure: it ends for good at the
// deadline (whoever looks first: Tenure.Live reads the monotonic clock
// itself, and a timer ends it at the deadline and tells Config.Ended),
// when a read shows another key first, when the session is lost, when the
// shard's key is released (Release), or at Close. A keep-alive answered
// after the deadline does not revive it: it starts a new Tenure. A key
// released never leads again: the shard is campaigned for again under a
// new key, with a later create revision, once the old one is deleted.
//
// Which shards a server campaigns for is the balance (Assign): the desired
// owner of each shard, computed by every server from the same member list
// (the addresses of the membership keys). A server puts its key for a
// shard when it is the shard's desired owner and withdraws (deletes) a
// queued key of a shard it is no longer desired for. A server that leads
// a shard it is no longer desired for keeps it until the desired server's
// key is queued right behind its own (Successor); the caller then ends
// its term and releases the key (a planned move). With one shard every
// member campaigns for it and keeps leading it while it lives, as a
// cluster with one leader does: the keys of the other members wait behind
// the leader's.
//
// One watch stream (one watch of the membership keys, one of the shard
// keys) wakes the server when a key comes or goes; each look is one
// linearizable read (a transaction of two range reads) for every shard.
// At steady state a server sends a keep-alive and a read every TTL/3,
// whatever the number of shards.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// MaxShards bounds Config.Shards (shard.MaxCount).
const MaxShards = 4096

// maxTxnOps bounds the operations of one transaction of campaign keys,
// within etcd's default --max-txn-ops (128).
const maxTxnOps = 100

// Config configures an Election.
type Config struct {
	// Client is the etcd client; the Election does not close it.
	Client *clientv3.Client
	// Prefix is the cluster's prefix, e.g. "/tollgate/": the keys are
	// under Prefix + "election/" and Prefix + "shards/".
	Prefix string
	// Advertise is this server's address for clients, the value of its keys.
	Advertise string
	// TTL is the session's etcd lease TTL (whole seconds, at least 1 s).
	TTL time.Duration
	// Margin is taken off the deadline; 0 means TTL/4.
	Margin time.Duration
	// Shards is the cluster's number of shards; 0 means 1.
	Shards int
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
	// Members are the live servers' addresses (their membership keys), in
	// the order they joined, the leader of shard 0 first.
	Members []string
	// Leader is shard 0's leader's address; "" when none is known.
	Leader string
	// Epoch is shard 0's leader key's create revision; 0 when none is
	// known.
	Epoch int64
	// Shards are the shards' leaders, in shard order.
	Shards []ShardView
}

// ShardView is a shard's leadership as last read.
type ShardView struct {
	// Leader is the address of the first key's server; "" when none.
	Leader string
	// Epoch is the first key's create revision; 0 when none.
	Epoch int64
	// Desired is the shard's desired owner by the balance; "" with one
	// shard (any member may lead it) or no member.
	Desired string
}

// key is a campaign or membership key as read.
type key struct {
	name  string
	addr  string
	lease clientv3.LeaseID
	rev   int64 // create revision
}

// shardState is what this server knows of one shard.
type shardState struct {
	queue  []key   // the shard's campaign keys, by create revision: the leader first
	tenure *Tenure // the leadership now; nil while not leading
	// floor: no key of this server with a create revision at or below it
	// leads (the keys it released).
	floor int64
	// releasing is our released key while its deletion is not known to
	// be done; "" when none.
	releasing    string
	releasingRev int64
}

// Election is one server's campaign. Create it with Start; Close or
// Resign it.
type Election struct {
	cfg    Config
	log    *slog.Logger
	margin time.Duration
	shards int

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	opMu   sync.Mutex // serializes the key writes of the run loop, Release and Leave
	// watched is the latest revision of the watch responses taken.
	watched atomic.Int64

	mu       sync.Mutex
	lease    clientv3.LeaseID // 0 while none is held
	deadline time.Time        // monotonic; zero when none
	leaving  bool             // Leave was called: no key is put any more
	members  []key            // the membership keys, by create revision
	addrs    []string         // the members' addresses, sorted, without duplicates
	desired  []string         // each shard's desired owner for addrs
	shard    []shardState
	changed  chan struct{} // closed and replaced on every change
	timer    *time.Timer   // fires at the deadline
}

// Tenure is one unbroken leadership of this server of one shard, under
// one campaign key and epoch. It ends once, for good.
type Tenure struct {
	// Shard is the shard led; Key is this server's campaign key for it,
	// Epoch its create revision.
	Shard int
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
	shards := cfg.Shards
	if shards == 0 {
		shards = 1
	}
	if shards < 1 || shards > MaxShards {
		return nil, fmt.Errorf("election: %d shards; a cluster has 1 to %d", cfg.Shards, MaxShards)
	}
	if cfg.keepAlive == nil {
		cfg.keepAlive = cfg.Client.KeepAliveOnce
	}
	e := newElection(cfg, margin, shards)
	go e.run()
	return e, nil
}

func newElection(cfg Config, margin time.Duration, shards int) *Election {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Election{cfg: cfg, log: log, margin: margin, shards: shards, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		changed: make(chan struct{}), shard: make([]shardState, shards), desired: make([]string, shards)}
}

// Shards is the number of shards campaigned for.
func (e *Election) Shards() int { return e.shards }

func (e *Election) memberPrefix() string { return e.cfg.Prefix + "election/" }
func (e *Election) shardPrefix() string  { return e.cfg.Prefix + "shards/" }
func (e *Election) memberKey(id clientv3.LeaseID) string {
	return fmt.Sprintf("%s%x", e.memberPrefix(), int64(id))
}
func (e *Election) shardKey(i int, id clientv3.LeaseID) string {
	return fmt.Sprintf("%s%d/%x", e.shardPrefix(), i, int64(id))
}

// Leading reports whether this server leads any shard now: its key is
// first and its deadline is ahead, in one unbroken tenure.
func (e *Election) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.shard {
		if e.shard[i].tenure.Live() {
			return true
		}
	}
	return false
}

// firstLocked reports whether the last read showed our key first in
// shard i, on our session, and not one we released.
func (e *Election) firstLocked(i int) bool {
	s := &e.shard[i]
	return e.lease != 0 && len(s.queue) > 0 && s.queue[0].lease == e.lease && s.queue[0].rev > s.floor &&
		s.queue[0].name == e.shardKey(i, e.lease)
}

func (e *Election) leadingLocked(i int, now time.Time) bool {
	return e.firstLocked(i) && now.Before(e.deadline)
}

// Tenure returns the leadership of shard 0 now, or nil while this server
// does not lead it.
func (e *Election) Tenure() *Tenure { return e.ShardTenure(0) }

// ShardTenure returns the leadership of shard i now, or nil while this
// server does not lead it.
func (e *Election) ShardTenure(i int) *Tenure {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.shard) || !e.shard[i].tenure.Live() {
		return nil
	}
	return e.shard[i].tenure
}

// SessionLive reports whether this server holds a session whose deadline
// is ahead.
func (e *Election) SessionLive() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease != 0 && time.Now().Before(e.deadline)
}

// settleLocked makes each shard's tenure match the state: it ends a
// tenure when this server does not lead its shard now (or leads under
// another key or epoch), and starts one when it leads and has none. It
// returns the tenures it ended, for ended.
func (e *Election) settleLocked(now time.Time) []*Tenure {
	var gone []*Tenure
	for i := range e.shard {
		s := &e.shard[i]
		if t := s.tenure; t != nil && (!t.Live() || !e.leadingLocked(i, now) || t.Key != s.queue[0].name || t.Epoch != s.queue[0].rev) {
			t.ended.Store(true)
			close(t.done)
			s.tenure = nil
			gone = append(gone, t)
		}
		if s.tenure == nil && e.leadingLocked(i, now) {
			t := &Tenure{Shard: i, Key: s.queue[0].name, Epoch: s.queue[0].rev, base: now, done: make(chan struct{})}
			t.deadline.Store(int64(e.deadline.Sub(now)))
			s.tenure = t
			e.notifyLocked()
		}
	}
	if gone != nil {
		e.notifyLocked()
	}
	return gone
}

// ended tells Config.Ended of tenures that ended; call it without e.mu.
func (e *Election) ended(ts []*Tenure) {
	if e.cfg.Ended == nil {
		return
	}
	for _, t := range ts {
		e.cfg.Ended(t)
	}
}

// Remaining is the time left on the leadership deadline; 0 when not
// leading any shard.
func (e *Election) Remaining() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	for i := range e.shard {
		if e.leadingLocked(i, now) {
			return e.deadline.Sub(now)
		}
	}
	return 0
}

// View returns the cluster as last read.
func (e *Election) View() View {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := View{Shards: make([]ShardView, len(e.shard))}
	for i := range e.shard {
		if q := e.shard[i].queue; len(q) > 0 {
			v.Shards[i].Leader, v.Shards[i].Epoch = q[0].addr, q[0].rev
		}
		if e.shards > 1 {
			v.Shards[i].Desired = e.desired[i]
		}
	}
	v.Leader, v.Epoch = v.Shards[0].Leader, v.Shards[0].Epoch
	for _, m := range e.members {
		v.Members = append(v.Members, m.addr)
	}
	if j := slices.Index(v.Members, v.Leader); j > 0 {
		copy(v.Members[1:j+1], v.Members[:j])
		v.Members[0] = v.Leader
	}
	return v
}

// Term returns this server's campaign key of shard 0 and the epoch while
// it leads it.
func (e *Election) Term() (key string, epoch int64, ok bool) {
	t := e.Tenure()
	if t == nil {
		return "", 0, false
	}
	return t.Key, t.Epoch, true
}

// Successor returns the server that shard i moves to in a planned move:
// this server leads i but no longer wants it (another member is its
// desired owner, or this server is leaving), and the desired owner's key
// (with one shard, or while no member is desired, any member's) is
// queued right behind this server's. ok is false otherwise.
func (e *Election) Successor(i int) (addr string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.shard) || !e.shard[i].tenure.Live() || e.wantsLocked(i) {
		return "", false
	}
	q := e.shard[i].queue
	if len(q) < 2 || q[1].lease == e.lease {
		return "", false
	}
	if want := e.desiredLocked(i); want != "" && q[1].addr != want {
		return "", false
	}
	return q[1].addr, true
}

// wantsLocked reports whether this server campaigns for shard i.
func (e *Election) wantsLocked(i int) bool {
	if e.leaving || e.lease == 0 {
		return false
	}
	return e.shards == 1 || e.desired[i] == e.cfg.Advertise
}

// desiredLocked is shard i's desired owner; "" when any member may lead it.
func (e *Election) desiredLocked(i int) string {
	if e.shards == 1 {
		return ""
	}
	return e.desired[i]
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

// Close stops campaigning without resigning: the keys stay until etcd
// expires the session, as if the process had died. Leading is false after.
func (e *Election) Close() {
	e.cancel()
	<-e.done
	e.mu.Lock()
	e.deadline = time.Time{}
	if e.timer != nil {
		e.timer.Stop()
	}
	gone := e.settleLocked(time.Now())
	e.notifyLocked()
	e.mu.Unlock()
	e.ended(gone)
}

// Resign stops campaigning and revokes the session, deleting its keys at
// once so that other servers can lead without waiting for the TTL.
func (e *Election) Resign(ctx context.Context) error {
	e.Close()
	e.mu.Lock()
	id := e.lease
	e.lease = 0
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

// Leave deletes this server's membership key: the other servers take it
// out of the balance and campaign for its shards. It puts no key after;
// each shard it leads has a Successor once the successor's key is
// queued. The session lives on until Resign.
func (e *Election) Leave(ctx context.Context) error {
	e.opMu.Lock()
	defer e.opMu.Unlock()
	e.mu.Lock()
	e.leaving = true
	id := e.lease
	e.notifyLocked()
	e.mu.Unlock()
	if id == 0 {
		return nil
	}
	if _, err := e.cfg.Client.Delete(ctx, e.memberKey(id)); err != nil {
		return fmt.Errorf("leaving the cluster (deleting the membership key): %w", err)
	}
	return nil
}

// Release ends the tenure t for good and deletes its key, in a
// transaction fenced on the key's create revision: the shard's next key
// in line leads. The key never leads again; this server campaigns for the
// shard again (if it is desired) only under a new key, once the old one
// is deleted. When the delete fails, it is retried at every keep-alive
// until it succeeds or the session goes (and its keys with it).
func (e *Election) Release(ctx context.Context, t *Tenure) error {
	if t == nil {
		return nil
	}
	e.opMu.Lock()
	defer e.opMu.Unlock()
	e.mu.Lock()
	s := &e.shard[t.Shard]
	s.floor = max(s.floor, t.Epoch)
	s.releasing, s.releasingRev = t.Key, t.Epoch
	gone := e.settleLocked(time.Now())
	e.mu.Unlock()
	e.ended(gone)
	return e.deleteReleased(ctx, t.Shard)
}

// deleteReleased deletes shard i's released key, if any, unless it has a
// later create revision than the one released. Call it with opMu held.
func (e *Election) deleteReleased(ctx context.Context, i int) error {
	e.mu.Lock()
	s := &e.shard[i]
	k, rev := s.releasing, s.releasingRev
	e.mu.Unlock()
	if k == "" {
		return nil
	}
	_, err := e.cfg.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", rev)).
		Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return fmt.Errorf("deleting the campaign key %s: %w", k, err)
	}
	e.mu.Lock()
	if s.releasing == k && s.releasingRev == rev {
		s.releasing, s.releasingRev = "", 0
	}
	e.mu.Unlock()
	return nil
}

// StepDown ends this server's leadership of every shard at once and gives
// up its session: it is no longer kept alive (its keys go when the revoke
// sent now gets through, or when etcd expires it), and the campaign goes
// on under a new session, whose keys have later create revisions. A write
// fenced on an old key cannot succeed once that key is gone, and a new key
// leads only after the old one is gone.
func (e *Election) StepDown() {
	e.mu.Lock()
	id := e.lease
	e.lease, e.deadline = 0, time.Time{}
	for i := range e.shard {
		e.shard[i].releasing, e.shard[i].releasingRev = "", 0 // go with the session
	}
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
	members, shards := e.watch()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	e.step(interval)
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
			if members == nil || shards == nil {
				members, shards = e.watch()
			}
			e.step(interval)
		case r, ok := <-members:
			if !ok {
				members = nil // watched again at the next tick
			}
			members, shards = e.drain(r.Header.Revision, members, shards)
			e.observe(interval) // a key came or went: read again at once
		case r, ok := <-shards:
			if !ok {
				shards = nil
			}
			members, shards = e.drain(r.Header.Revision, members, shards)
			e.observe(interval)
		}
	}
}

// drain takes the watch responses already there, so that a burst of
// changes (a server's keys deleted one by one as it hands its shards off)
// costs one read, not one a change. A channel that closed comes back nil.
// It notes the latest revision the responses taken were at.
func (e *Election) drain(rev int64, members, shards clientv3.WatchChan) (clientv3.WatchChan, clientv3.WatchChan) {
	defer func() {
		if rev > e.watched.Load() {
			e.watched.Store(rev)
		}
	}()
	for {
		select {
		case r, ok := <-members:
			if !ok {
				members = nil
			}
			rev = max(rev, r.Header.Revision)
		case r, ok := <-shards:
			if !ok {
				shards = nil
			}
			rev = max(rev, r.Header.Revision)
		default:
			return members, shards
		}
	}
}

// watch watches the membership and the campaign keys, on one watch
// stream; a channel closes when its watch fails (both are then made
// again).
func (e *Election) watch() (members, shards clientv3.WatchChan) {
	ctx := clientv3.WithRequireLeader(e.ctx)
	return e.cfg.Client.Watch(ctx, e.memberPrefix(), clientv3.WithPrefix()),
		e.cfg.Client.Watch(ctx, e.shardPrefix(), clientv3.WithPrefix())
}

// step renews (or starts) the session and campaigns, then observes.
func (e *Election) step(timeout time.Duration) {
	e.mu.Lock()
	id, leaving := e.lease, e.leaving
	e.mu.Unlock()
	if id == 0 {
		if leaving {
			return
		}
		if err := e.newSession(timeout); err != nil {
			e.log.Warn("cannot start an etcd session; retrying", "err", err)
			return
		}
	} else if !e.keepAlive(id, timeout) {
		return
	}
	e.retryReleases(timeout)
	e.observe(timeout)
}

// retryReleases deletes the released keys whose deletion failed.
func (e *Election) retryReleases(timeout time.Duration) {
	e.opMu.Lock()
	defer e.opMu.Unlock()
	for i := range e.shards {
		e.mu.Lock()
		pending := e.shard[i].releasing != ""
		e.mu.Unlock()
		if pending {
			ctx, cancel := context.WithTimeout(e.ctx, timeout)
			err := e.deleteReleased(ctx, i)
			cancel()
			if err != nil {
				e.log.Warn("cannot delete a released campaign key; retrying", "err", err)
				return
			}
		}
	}
}

// newSession grants a lease and puts our membership key on it (with one
// shard, and the shard's key, in the same transaction).
func (e *Election) newSession(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	sent := time.Now()
	g, err := e.cfg.Client.Grant(ctx, int64(e.cfg.TTL/time.Second))
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(e.memberKey(g.ID), e.cfg.Advertise, clientv3.WithLease(g.ID))}
	if e.shards == 1 {
		ops = append(ops, clientv3.OpPut(e.shardKey(0, g.ID), e.cfg.Advertise, clientv3.WithLease(g.ID)))
	}
	if _, err = e.cfg.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), timeout)
		_, _ = e.cfg.Client.Revoke(cctx, g.ID)
		ccancel()
		return err
	}
	e.mu.Lock()
	e.lease = g.ID
	gone := e.renewedLocked(sent, time.Duration(g.TTL)*time.Second)
	e.mu.Unlock()
	e.ended(gone)
	e.log.Info("campaigning", "key", e.memberKey(g.ID), "shards", e.shards, "ttl", e.cfg.TTL)
	return nil
}

// keepAlive renews the session once and reports whether it did. When the
// session is gone, a new one is started at the next step.
func (e *Election) keepAlive(id clientv3.LeaseID, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	sent := time.Now()
	resp, err := e.cfg.keepAlive(ctx, id)
	var gone []*Tenure
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
		e.lease, e.deadline = 0, time.Time{}
		for i := range e.shard {
			e.shard[i].releasing, e.shard[i].releasingRev = "", 0 // gone with the session
		}
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
// timer that ends the tenures when it passes. A tenure whose deadline has
// passed already ends first: it does not revive (a new one starts). It
// returns the tenures it ended.
func (e *Election) renewedLocked(sent time.Time, ttl time.Duration) []*Tenure {
	ttl = min(ttl, e.cfg.TTL)
	d := sent.Add(ttl - e.margin)
	if !d.After(e.deadline) {
		return nil
	}
	now := time.Now()
	gone := e.settleLocked(now) // ends the tenures whose deadline passed
	was := now.Before(e.deadline)
	e.deadline = d
	for i := range e.shard {
		if t := e.shard[i].tenure; t != nil {
			t.deadline.Store(int64(d.Sub(t.base)))
		}
	}
	gone = append(gone, e.settleLocked(now)...)
	if !was {
		e.notifyLocked()
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.AfterFunc(time.Until(d), e.atDeadline)
	return gone
}

// atDeadline ends the tenures whose deadline has passed, at once, and
// tells Config.Ended.
func (e *Election) atDeadline() {
	e.mu.Lock()
	now := time.Now()
	if now.Before(e.deadline) {
		e.mu.Unlock()
		return
	}
	gone := e.settleLocked(now)
	if len(gone) > 0 {
		e.log.Warn("leadership deadline passed without a renewed session; no longer leading", "shards", len(gone))
	}
	e.notifyLocked()
	e.mu.Unlock()
	e.ended(gone)
}

// observe reads the membership and campaign keys (one linearizable
// read), updates the view and the tenures, and campaigns: it puts this
// server's key for each shard it is desired for and has none, and
// withdraws its queued keys of shards it is not desired for.
func (e *Election) observe(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	sorted := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	resp, err := e.cfg.Client.Txn(ctx).Then(clientv3.OpGet(e.memberPrefix(), sorted...), clientv3.OpGet(e.shardPrefix(), sorted...)).Commit()
	if err != nil {
		return // the deadline decides meanwhile
	}
	var members []key
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		members = append(members, key{name: string(kv.Key), addr: string(kv.Value), lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision})
	}
	queues := make([][]key, e.shards)
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		rest := strings.TrimPrefix(string(kv.Key), e.shardPrefix())
		slash := strings.IndexByte(rest, '/')
		if slash < 0 {
			continue
		}
		i, err := strconv.Atoi(rest[:slash])
		if err != nil || i < 0 || i >= e.shards {
			continue
		}
		queues[i] = append(queues[i], key{name: string(kv.Key), addr: string(kv.Value), lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision})
	}
	e.mu.Lock()
	changed := !slices.Equal(members, e.members)
	e.members = members
	e.rebalanceLocked()
	for i := range e.shard {
		if !slices.Equal(queues[i], e.shard[i].queue) {
			e.shard[i].queue, changed = queues[i], true
		}
	}
	gone := e.settleLocked(time.Now())
	if changed {
		e.notifyLocked()
	}
	e.mu.Unlock()
	e.ended(gone)
	e.campaign(timeout)
}

// rebalanceLocked recomputes the desired owners when the members changed.
func (e *Election) rebalanceLocked() {
	var addrs []string
	for _, m := range e.members {
		addrs = append(addrs, m.addr)
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if e.shards == 1 || slices.Equal(addrs, e.addrs) && e.addrs != nil {
		e.addrs = addrs
		return
	}
	e.addrs = addrs
	e.desired = Assign(addrs, e.shards)
}

// campaign puts and withdraws this server's campaign keys as the last
// read and the balance say.
func (e *Election) campaign(timeout time.Duration) {
	e.opMu.Lock()
	defer e.opMu.Unlock()
	e.mu.Lock()
	id := e.lease
	var ops []clientv3.Op
	var cmps []clientv3.Cmp
	if id != 0 && e.memberSeenLocked(id) {
		for i := range e.shard {
			s := &e.shard[i]
			k := e.shardKey(i, id)
			at := slices.IndexFunc(s.queue, func(q key) bool { return q.name == k })
			switch {
			case at < 0 && e.wantsLocked(i) && s.releasing == "":
				ops = append(ops, clientv3.OpPut(k, e.cfg.Advertise, clientv3.WithLease(id)))
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			case at > 0 && !e.wantsLocked(i):
				ops = append(ops, clientv3.OpDelete(k))
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", s.queue[at].rev))
			}
		}
	}
	e.mu.Unlock()
	if len(ops) > 0 {
		e.log.Debug("putting and withdrawing campaign keys", "changes", len(ops))
	}
	for len(ops) > 0 {
		// Each change is made only if its key is as read (absent, or the
		// queued key read): one that changed meanwhile is looked at again at
		// the next read, which the change's watch event brings.
		n := min(len(ops), maxTxnOps)
		each := make([]clientv3.Op, n)
		for j := range n {
			each[j] = clientv3.OpTxn([]clientv3.Cmp{cmps[j]}, []clientv3.Op{ops[j]}, nil)
		}
		ctx, cancel := context.WithTimeout(e.ctx, timeout)
		_, err := e.cfg.Client.Txn(ctx).Then(each...).Commit()
		cancel()
		if err != nil {
			e.log.Warn("cannot put or withdraw campaign keys; retrying at the next keep-alive", "err", err)
			return
		}
		ops, cmps = ops[n:], cmps[n:]
	}
}

// memberSeenLocked reports whether the last read showed our membership
// key: only a member campaigns for shards.
func (e *Election) memberSeenLocked(id clientv3.LeaseID) bool {
	return slices.ContainsFunc(e.members, func(m key) bool { return m.lease == id })
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
