// Package cluster runs the leadership terms of a server of a cluster of
// servers sharing etcd (serve --etcd): its campaign over internal/election;
// a term for each leadership of a shard it wins, on a store whose writes
// are fenced on that leadership; which shards it leads now (Leads, Map,
// View); the planned moves that balance the shards over the servers; the
// leadership's metrics and events; and the NOT_LEADER status with which a
// server that does not lead a pool's shard answers.
//
// A shard's term ends with a hand-off when the shard moves (its final
// fenced write, then its key deleted: the successor leads at once). A
// term that ends otherwise is followed only under a new key: when the
// session's deadline has passed, every shard's tenure has ended with it
// and the server gives up the whole session (StepDown), as a server of
// one shard always did; when one shard's term ends while the session
// lives (a fenced write failed, a write got no answer, its key was read
// gone), only that shard's key is deleted and campaigned for again, and
// the server's other shards go on: one slow write does not cost every
// shard a failover.
//
// The server serves the terms: it is the campaign's Host, told when a
// term starts (to build the term, its engine restored from the term's
// store, and serve it) and when it ends. The package may import
// internal/election, internal/events, internal/refuse, internal/term, the
// engine (limiter), server/store/etcdstore, proto/tollgate/v1/shard,
// etcd's client and Prometheus; nothing of the server.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
	"github.com/tollgate/tollgate/server/store/etcdstore"
)

// Config configures a Campaign.
type Config struct {
	// Client reaches etcd; the Campaign does not close it.
	Client *clientv3.Client
	// Prefix is where the cluster's keys live in etcd.
	Prefix string
	// SessionTTL is the etcd session's TTL (whole seconds).
	SessionTTL time.Duration
	// Margin is taken off the leadership deadline; 0 means SessionTTL/4.
	Margin time.Duration
	// Advertise is this server's address for clients.
	Advertise string
	// Logger receives the campaign's logs; nil discards them.
	Logger *slog.Logger
	// Shards is the cluster's number of shards, as LoadShardCount
	// returned it; 0 means 1.
	Shards int
}

// LoadShardCount returns the cluster's number of shards: the one stored
// in etcd under prefix (PREFIX/meta/shards, decimal), or, for a cluster
// that has none stored yet, want (the --shards flag), which it stores (a
// transaction that only the first server to get there wins). A cluster
// whose pools were stored before shards existed (meta/initialized there,
// meta/shards not) has one, which it stores. When want differs from the
// stored count it logs a warning naming both and uses the stored one. A
// stored count outside 1..shard.MaxCount is refused.
func LoadShardCount(ctx context.Context, c *clientv3.Client, prefix string, want int, log *slog.Logger) (int, error) {
	if want < 1 || want > shard.MaxCount {
		return 0, fmt.Errorf("%d shards asked for; a cluster has 1 to %d", want, shard.MaxCount)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key, initialized := prefix+"meta/shards", prefix+"meta/initialized"
	absent := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	fresh := clientv3.Compare(clientv3.CreateRevision(initialized), "=", 0)
	// A cluster with no count stored gets want if it has no pools yet, else 1.
	resp, err := c.Txn(ctx).If(absent).
		Then(clientv3.OpTxn([]clientv3.Cmp{fresh}, []clientv3.Op{clientv3.OpPut(key, strconv.Itoa(want))},
			[]clientv3.Op{clientv3.OpPut(key, "1")})).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, fmt.Errorf("reading the shard count from etcd (%s): %w", key, err)
	}
	n := want
	if resp.Succeeded {
		if !resp.Responses[0].GetResponseTxn().GetSucceeded() {
			n = 1
			log.Info("the cluster's pools were stored before shards existed: it has one shard", "key", key)
		} else {
			log.Info("created the cluster with its number of shards", "shards", n, "key", key)
		}
	} else {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) != 1 {
			return 0, fmt.Errorf("reading the shard count from etcd (%s): it went away meanwhile; start again", key)
		}
		v, perr := strconv.Atoi(string(kvs[0].Value))
		if perr != nil || v < 1 || v > shard.MaxCount {
			return 0, fmt.Errorf("etcd holds a damaged shard count %q at %s: a cluster has 1 to %d shards", kvs[0].Value, key, shard.MaxCount)
		}
		n = v
	}
	if n != want {
		log.Warn("the cluster's number of shards differs from --shards: using the cluster's", "cluster_shards", n, "flag_shards", want)
	}
	return n, nil
}

// Host serves a Campaign's terms. For one shard, the calls are
// serialized: its EndTerm comes after its StartTerm returned, and its
// next StartTerm after that EndTerm returned. Across shards, StartTerm of
// different shards may run concurrently (the shards won together are
// started side by side, up to 16 at once), while EndTerm is never called
// concurrently with another EndTerm or with a StartTerm. RecordEvent may
// be called concurrently from the StartTerms; LeadershipChanged also from
// the goroutine that sees a leadership deadline pass.
type Host interface {
	// StartTerm builds the term of the leadership of epoch of shard (term.New,
	// with tenure, the leadership's liveness), its engine writing to st
	// (the term's store, every write fenced on the leadership) and acting
	// while the term does (the engine's Options.Live: false from the
	// leadership deadline on, or once the term ends, for good), restores
	// the engine from st (the shard's pools) and serves the term. The
	// Campaign begins and ends it. The term does not start when StartTerm
	// fails; the Campaign retries.
	StartTerm(shard int, st *etcdstore.Store, epoch int64, tenure func() bool) (*term.Term, error)
	// EndTerm stops serving t, shard's term, which has ended: its engine's
	// waiting calls fail and it closes, after its final write (the exact
	// weight its pools hold, so that the next term needs no recovery
	// window for what they do not hold) when handOff. No pools of the
	// shard are served until its next StartTerm.
	EndTerm(shard int, t *term.Term, handOff bool)
	// LeadershipChanged is told that Leading may have changed; at the
	// leadership deadline it is told by the deadline's timer, at once. It
	// must not block.
	LeadershipChanged()
	// RecordEvent records an event of the leadership.
	RecordEvent(ev events.Event)
}

// Campaign runs a server's campaign and its leadership terms, one per
// shard it leads: each term serves a new engine restored from etcd, as a
// restart would. Create it with New and start it with Start; Stop ends it.
//
// A term ends with a hand-off in a planned move (the server no longer is
// the shard's desired owner and its successor's key is queued behind its
// own; or it stops): it ends the term with its final fenced write, then
// deletes its key, and the successor leads. A term that ends without a
// hand-off (its tenure ended, a fenced write failed, a write got no
// answer) is followed by the shard's next term only under a new key: while
// the session is live, the campaign releases the shard's key alone (the
// other shards go on); when the session's deadline has passed (which ends
// every shard's tenure at once) it steps down, giving up the whole session
// as a server of one shard always did.
type Campaign struct {
	cfg     Config
	log     *slog.Logger
	shards  int
	host    Host
	el      *election.Election
	wake    chan struct{} // a term's write failed or got no answer
	quit    chan struct{}
	done    chan struct{}
	drained chan struct{} // closed once a leaving campaign leads nothing
	leaving atomic.Bool
	stopped sync.Once
	changes atomic.Int64 // leadership of a shard gained or lost
	moves   atomic.Int64 // shards handed off in planned moves

	mu     sync.Mutex
	terms  []*lead  // by shard; nil while not leading it
	moving []string // by shard: the server it moves to, in a planned move
}

// lead is one leadership term of a shard: one tenure of the election,
// and the term it is served by.
type lead struct {
	shard   int
	tenure  *election.Tenure
	t       *term.Term  // nil until the host has started it
	deposed atomic.Bool // a fenced write failed
	unsure  atomic.Bool // a write got no answer
}

// New returns a Campaign that has not started: it does not lead.
func New(cfg Config) *Campaign {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := max(cfg.Shards, 1)
	return &Campaign{cfg: cfg, log: log, shards: n, wake: make(chan struct{}, 1), quit: make(chan struct{}),
		done: make(chan struct{}), drained: make(chan struct{}), terms: make([]*lead, n), moving: make([]string, n)}
}

// Start campaigns for leadership and runs a term on h for each
// leadership of a shard won, until Stop. It returns at once.
func (c *Campaign) Start(h Host) error {
	if c.cfg.Shards < 0 || c.cfg.Shards > shard.MaxCount {
		return fmt.Errorf("%d shards; a cluster has 1 to %d", c.cfg.Shards, shard.MaxCount)
	}
	c.host = h
	el, err := election.Start(election.Config{Client: c.cfg.Client, Prefix: c.cfg.Prefix, Shards: c.shards,
		Advertise: c.cfg.Advertise, TTL: c.cfg.SessionTTL, Margin: c.cfg.Margin, Logger: c.log, Ended: c.tenureEnded})
	if err != nil {
		return err
	}
	c.el = el
	go c.run()
	return nil
}

// tenureEnded is told by the election that a tenure ended (at the
// deadline, by its timer): health says so at once, not once the term is
// ended (which may wait on etcd).
func (c *Campaign) tenureEnded(ten *election.Tenure) {
	if l := c.current(ten.Shard); l != nil && l.tenure == ten {
		c.host.LeadershipChanged()
	}
}

// Leading reports whether this server leads some shard and serves its
// term: the term has begun and acts (its tenure's deadline ahead, by the
// monotonic clock, read now).
func (c *Campaign) Leading() bool {
	for i := range c.shards {
		if c.Leads(i) {
			return true
		}
	}
	return false
}

// Led is the number of shards this server leads and serves now.
func (c *Campaign) Led() int {
	n := 0
	for i := range c.shards {
		if c.Leads(i) {
			n++
		}
	}
	return n
}

// View is a server's account of its cluster.
type View struct {
	// Self is this server's advertised address.
	Self string
	// Members are the advertised addresses of the live servers of the
	// cluster, shard 0's leader first.
	Members []string
	// Leader is shard 0's leader's advertised address; empty while none
	// is known.
	Leader string
	// Epoch grows with every new leadership of shard 0 (the leader key's
	// etcd revision); 0 while none is known.
	Epoch int64
	// Remaining is the time left on this server's leadership deadline; 0
	// when it leads no shard.
	Remaining time.Duration
}

// View describes the cluster as this server last read it.
func (c *Campaign) View() View {
	v := c.el.View()
	cv := View{Self: c.cfg.Advertise, Members: v.Members, Leader: v.Leader, Epoch: v.Epoch}
	if c.Leading() {
		cv.Remaining = c.el.Remaining()
	}
	return cv
}

// Owner is the leadership of one shard as this server last read it.
type Owner struct {
	// Shard is the shard's number, from 0.
	Shard int
	// Owner is the advertised address of the server that leads it; ""
	// while none is known.
	Owner string
	// Epoch is the create revision of the owner's campaign key for the
	// shard; 0 while none is known.
	Epoch int64
	// MovingTo is, during a planned move, the server the shard moves to.
	MovingTo string
}

// Shards is the cluster's number of shards.
func (c *Campaign) Shards() int { return c.shards }

// Map is the shard map as this server last read it, one Owner per shard
// in shard order. A shard this server moves away names its successor in
// MovingTo from the moment it stops granting in it until the successor's
// key is read first.
func (c *Campaign) Map() []Owner {
	v := c.el.View()
	m := make([]Owner, c.shards)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range m {
		m[i] = Owner{Shard: i}
		if i < len(v.Shards) {
			m[i].Owner, m[i].Epoch = v.Shards[i].Leader, v.Shards[i].Epoch
		}
		if m[i].Owner == c.cfg.Advertise && c.terms[i] == nil {
			m[i].MovingTo = c.moving[i]
		}
	}
	return m
}

// Owner is the leadership of shard as this server last read it; an Owner
// with no owner when shard is out of range.
func (c *Campaign) Owner(shard int) Owner {
	if m := c.Map(); shard >= 0 && shard < len(m) {
		return m[shard]
	}
	return Owner{Shard: shard}
}

// Leads reports whether this server leads shard and serves its term now.
func (c *Campaign) Leads(shard int) bool {
	l := c.current(shard)
	return l != nil && l.t.Leading()
}

// Election is the campaign's election.
func (c *Campaign) Election() *election.Election { return c.el }

// Lapse makes the current terms stop leading without ending them, as
// their leadership deadline does before the campaign ends the terms:
// their engines freeze and health is told. For tests of that moment.
func (c *Campaign) Lapse() {
	lapsed := false
	for i := range c.shards {
		if l := c.current(i); l != nil {
			l.t.Lapse()
			lapsed = true
		}
	}
	if lapsed {
		c.host.LeadershipChanged()
	}
}

func (c *Campaign) current(shard int) *lead {
	c.mu.Lock()
	defer c.mu.Unlock()
	if shard < 0 || shard >= len(c.terms) {
		return nil
	}
	return c.terms[shard]
}

// run starts and ends terms as the election and the store say, until
// Stop.
func (c *Campaign) run() {
	defer close(c.done)
	for {
		changed := c.el.Changed()
		var retry <-chan time.Time
		failed, acted := c.settle()
		if failed {
			retry = time.After(c.cfg.SessionTTL / 3)
		}
		c.host.LeadershipChanged()
		if acted {
			continue // look again: a term started may have to move already
		}
		if c.leaving.Load() && (c.countTerms() == 0 || !c.othersKnown()) {
			c.closeDrained() // nothing left to hand off, or no one to hand it to
		}
		select {
		case <-changed:
		case <-retry:
		case <-c.wake:
		case <-c.quit:
			return
		}
	}
}

// othersKnown reports whether the last read showed a member other than
// this server.
func (c *Campaign) othersKnown() bool {
	for _, m := range c.el.View().Members {
		if m != c.cfg.Advertise {
			return true
		}
	}
	return false
}

func (c *Campaign) countTerms() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.terms {
		if l != nil {
			n++
		}
	}
	return n
}

func (c *Campaign) closeDrained() {
	select {
	case <-c.drained:
	default:
		close(c.drained)
	}
}

// settle ends the terms that must end, hands off the shards that move,
// and starts a term for each shard led without one. It reports whether a
// term could not start (it is retried), and whether it started or ended
// any.
func (c *Campaign) settle() (failed, acted bool) {
	stepDown := false
	var won []*election.Tenure
	for i := range c.shards {
		ten := c.el.ShardTenure(i)
		if l := c.current(i); l != nil {
			switch {
			case l.deposed.Load():
				c.endTerm(l, false, "a fenced write failed: another server leads")
				c.release(l)
			case l.unsure.Load():
				// etcd may hold a change this term's engine does not have,
				// or get it later (a write still in flight).
				c.endTerm(l, false, "a write to etcd got no answer: the next term restarts from what etcd holds")
				c.release(l)
			case ten == nil || ten != l.tenure || !l.t.Acting():
				c.endTerm(l, false, "leadership lost")
				if c.el.SessionLive() && time.Now().Before(l.tenure.Deadline()) {
					c.release(l)
				} else {
					stepDown = true // the deadline passed: every shard's tenure ended with it
				}
			default:
				if to, ok := c.el.Successor(i); ok {
					c.move(l, to)
				}
			}
			acted = acted || c.current(i) == nil
			continue // a new term, if any, at the next look
		}
		if ten != nil {
			won = append(won, ten)
		}
	}
	if stepDown {
		c.el.StepDown()
		return false, true
	}
	started, failed := c.startTerms(won)
	return failed, acted || started
}

// maxStarting bounds the terms started at once.
const maxStarting = 16

// startTerms starts a term for each of the tenures won, up to
// maxStarting at once: a server that takes many shards together (a
// successor in a stop, a survivor after a death) restores them side by
// side. It reports whether it started any, and whether any failed.
func (c *Campaign) startTerms(won []*election.Tenure) (started, failed bool) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, maxStarting)
	for _, ten := range won {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := c.startTerm(ten)
			if err != nil {
				c.log.Error("leading a shard, but cannot load its pools from etcd; retrying", "shard", ten.Shard, "err", err)
			}
			mu.Lock()
			defer mu.Unlock()
			started = started || err == nil
			failed = failed || err != nil
		}()
	}
	wg.Wait()
	return started, failed
}

// release deletes the key of l's ended term, so that the shard's next
// term (this server's or another's) starts under a new key once the old
// one is gone: a write of the ended term still in flight then cannot land
// (every write is fenced on the old key), and the next term restores what
// etcd holds from then on. Without it, this server could lead again under
// the same key, where a late write of the ended term could overwrite what
// the new term wrote.
func (c *Campaign) release(l *lead) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTTL/3)
	defer cancel()
	if err := c.el.Release(ctx, l.tenure); err != nil {
		c.log.Warn("cannot delete the campaign key of an ended term; retrying", "shard", l.shard, "err", err)
	}
}

// move hands shard l.shard off to the server to: it stops granting (the
// shard's NOT_LEADER names to), ends the term with its final fenced
// write, and deletes its key, so that to's key comes first and to starts
// its term at once.
func (c *Campaign) move(l *lead, to string) {
	c.log.Debug("moving a shard", "shard", l.shard, "to", to)
	c.mu.Lock()
	c.moving[l.shard] = to
	c.mu.Unlock()
	c.endTerm(l, true, "moving to "+to)
	c.release(l)
	c.moves.Add(1)
}

// startTerm has the host serve a new term of ten's shard, its engine
// restored from etcd, every write fenced on the leadership of the tenure
// ten, acting while the tenure is live.
func (c *Campaign) startTerm(ten *election.Tenure) error {
	l := &lead{shard: ten.Shard, tenure: ten}
	epoch := ten.Epoch
	flag := func(b *atomic.Bool) func() {
		return func() {
			b.Store(true)
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
	}
	st := etcdstore.New(c.cfg.Client, c.cfg.Prefix, etcdstore.Options{LeaderKey: ten.Key, LeaderRev: epoch, Leading: ten.Live,
		Shard: ten.Shard, Shards: c.shards, Deposed: flag(&l.deposed), Unsure: flag(&l.unsure)})
	t, err := c.host.StartTerm(ten.Shard, st, epoch, ten.Live)
	if err != nil {
		return err
	}
	c.mu.Lock()
	l.t = t
	c.terms[ten.Shard] = l
	c.moving[ten.Shard] = ""
	c.mu.Unlock()
	t.Begin()
	c.changes.Add(1)
	c.host.RecordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s leads%s, epoch %d", c.cfg.Advertise, c.shardName(ten.Shard), epoch)})
	return nil
}

// endTerm ends l's term: its engine acts no more, no call starts on it,
// its streams end (on its Done) and the host stops serving it.
func (c *Campaign) endTerm(l *lead, handOff bool, why string) {
	l.t.End()
	c.mu.Lock()
	c.terms[l.shard] = nil
	c.mu.Unlock()
	c.host.EndTerm(l.shard, l.t, handOff)
	c.changes.Add(1)
	c.host.LeadershipChanged()
	c.host.RecordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s stopped leading%s epoch %d: %s", c.cfg.Advertise, c.shardName(l.shard), l.tenure.Epoch, why)})
}

// shardName names shard i in an event's detail: " shard i" in a cluster
// of several shards; nothing with one, whose events read as before shards.
func (c *Campaign) shardName(i int) string {
	if c.shards == 1 {
		return ""
	}
	return " shard " + strconv.Itoa(i)
}

// Stop ends the campaign: the server leaves the cluster (its membership
// key goes, and the other servers campaign for its shards), hands each
// shard off in a planned move once its successor's key is queued (waiting
// up to the session TTL for all of them, and not at all when it knows no
// other member), hands off those still led (their final writes made) and
// resigns the session, so that other servers lead at once. It is
// idempotent.
func (c *Campaign) Stop() {
	c.stopped.Do(func() {
		c.leaving.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTTL)
		defer cancel()
		if err := c.el.Leave(ctx); err != nil {
			c.log.Warn("could not leave the cluster; handing the shards off without waiting for successors", "err", err)
		} else {
			select {
			case <-c.drained:
			case <-ctx.Done():
				c.log.Warn("not every shard found its successor in time; handing the rest off", "shards", c.Led())
			}
		}
		close(c.quit)
		<-c.done
		for i := range c.shards {
			if l := c.current(i); l != nil {
				c.endTerm(l, true, "shutting down")
			}
		}
		rctx, rcancel := context.WithTimeout(context.Background(), c.cfg.SessionTTL)
		defer rcancel()
		if err := c.el.Resign(rctx); err != nil {
			c.log.Warn("could not resign; other servers lead its shards once the session expires", "err", err)
		}
	})
}

// Close ends the campaign as a crash would: nothing is handed off and
// the session is not resigned, so its keys stay in etcd until the session
// expires and the other servers take its shards then. Its terms end
// without a hand-off. For tests of a server's death; Stop is the way out
// of a server that stops. Close and Stop are idempotent together: the
// first called wins.
func (c *Campaign) Close() {
	c.stopped.Do(func() {
		close(c.quit)
		<-c.done
		c.el.Close()
		for i := range c.shards {
			if l := c.current(i); l != nil {
				c.endTerm(l, false, "closed")
			}
		}
	})
}

// Collectors are the leadership's metrics.
func (c *Campaign) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_leader",
			Help: "1 while this server leads (and serves) a shard of its cluster, else 0."}, func() float64 {
			if c.Leading() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_leader_changes_total",
			Help: "Times this server started or stopped leading a shard."}, func() float64 { return float64(c.changes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_leadership_remaining_seconds",
			Help: "Time left on this server's leadership deadline (0 when it leads no shard)."}, func() float64 {
			if !c.Leading() {
				return 0
			}
			return c.el.Remaining().Seconds()
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_shards_led",
			Help: "Shards this server leads and serves now."}, func() float64 { return float64(c.Led()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_shard_moves_total",
			Help: "Shards this server handed off to another in a planned move."}, func() float64 { return float64(c.moves.Load()) }),
	}
}
