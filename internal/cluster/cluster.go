// Package cluster runs the leadership terms of a server of a cluster of
// servers sharing etcd (serve --etcd): its campaign over internal/election;
// a term for each leadership it wins, on a store whose writes are fenced
// on that leadership; whether it leads now (Leading, View); the
// leadership's metrics and events; and the NOT_LEADER status with which a
// server that does not lead answers.
//
// The server serves the terms: it is the campaign's Host, told when a
// term starts (to build the term, its engine restored from the term's
// store, and serve it) and when it ends. The package may import
// internal/election, internal/events, internal/refuse, internal/term, the
// engine (limiter),
// server/store/etcdstore, etcd's client and Prometheus; nothing of the
// server.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/term"
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
// in etcd under prefix, or, for a cluster that has none stored yet, want
// (the --shards flag), which it stores. A cluster whose pools were stored
// before shards existed has one. When want differs from the stored count
// it logs a warning naming both and uses the stored one.
func LoadShardCount(ctx context.Context, c *clientv3.Client, prefix string, want int, log *slog.Logger) (int, error) {
	return 1, nil
}

// Host serves a Campaign's terms. The Campaign calls StartTerm, EndTerm
// and RecordEvent from one goroutine at a time, a term's EndTerm after
// its StartTerm; LeadershipChanged also from the goroutine that sees a
// leadership deadline pass.
type Host interface {
	// StartTerm builds the term of the leadership of epoch of shard (term.New,
	// with tenure, the leadership's liveness), its engine writing to st
	// (the term's store, every write fenced on the leadership) and acting
	// while the term does (the engine's Options.Live: false from the
	// leadership deadline on, or once the term ends, for good), restores
	// the engine from st and serves the term. The Campaign begins and
	// ends it. The term does not start when StartTerm fails; the Campaign
	// retries.
	StartTerm(shard int, st *etcdstore.Store, epoch int64, tenure func() bool) (*term.Term, error)
	// EndTerm stops serving t, which has ended: its engine's waiting
	// calls fail and it closes, after its final write (the pools that
	// hold nothing, which then need no recovery window) when handOff. No
	// pools are served until the next StartTerm.
	EndTerm(shard int, t *term.Term, handOff bool)
	// LeadershipChanged is told that Leading may have changed; at the
	// leadership deadline it is told by the deadline's timer, at once. It
	// must not block.
	LeadershipChanged()
	// RecordEvent records an event of the leadership.
	RecordEvent(ev events.Event)
}

// Campaign runs a server's campaign and its leadership terms: each term
// serves a new engine restored from etcd, as a restart would. Create it
// with New and start it with Start; Stop ends it.
type Campaign struct {
	cfg     Config
	log     *slog.Logger
	host    Host
	el      *election.Election
	deposed chan *lead // a term whose fenced write failed
	unsure  chan *lead // a term one of whose writes got no answer
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
	changes atomic.Int64 // leadership gained or lost

	mu   sync.Mutex
	term *lead // nil while not leading
}

// lead is one leadership term: one tenure of the election, and the term
// it is served by.
type lead struct {
	tenure *election.Tenure
	t      *term.Term // nil until the host has started it
}

// New returns a Campaign that has not started: it does not lead.
func New(cfg Config) *Campaign {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Campaign{cfg: cfg, log: log, deposed: make(chan *lead, 1), unsure: make(chan *lead, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// Start campaigns for leadership and runs a term on h for each
// leadership won, until Stop. It returns at once.
func (c *Campaign) Start(h Host) error {
	c.host = h
	el, err := election.Start(election.Config{Client: c.cfg.Client, Prefix: c.cfg.Prefix + "election/",
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
	if t := c.current(); t != nil && t.tenure == ten {
		c.host.LeadershipChanged()
	}
}

// Leading reports whether this server leads and serves a term: its term
// has begun and acts (its tenure's deadline ahead, by the monotonic
// clock, read now).
func (c *Campaign) Leading() bool {
	l := c.current()
	return l != nil && l.t.Leading()
}

// View is a server's account of its cluster.
type View struct {
	// Self is this server's advertised address.
	Self string
	// Members are the advertised addresses of the servers campaigning for
	// leadership, the leader first.
	Members []string
	// Leader is the leader's advertised address; empty while none is known.
	Leader string
	// Epoch grows with every new leadership (the leader key's etcd
	// revision); 0 while none is known.
	Epoch int64
	// Remaining is the time left on this server's leadership deadline; 0
	// when it does not lead.
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
func (c *Campaign) Shards() int { return 1 }

// Map is the shard map as this server last read it, one Owner per shard
// in shard order.
func (c *Campaign) Map() []Owner {
	v := c.View()
	return []Owner{{Shard: 0, Owner: v.Leader, Epoch: v.Epoch}}
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
func (c *Campaign) Leads(shard int) bool { return shard == 0 && c.Leading() }

// Election is the campaign's election.
func (c *Campaign) Election() *election.Election { return c.el }

// Lapse makes the current term stop leading without ending it, as its
// leadership deadline does before the campaign ends the term: its engine
// freezes and health is told. For tests of that moment.
func (c *Campaign) Lapse() {
	if l := c.current(); l != nil {
		l.t.Lapse()
		c.host.LeadershipChanged()
	}
}

func (c *Campaign) current() *lead {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

// run starts and ends terms as the election and the store say, until
// Stop.
func (c *Campaign) run() {
	defer close(c.done)
	var dead struct {
		key   string
		epoch int64
	}
	for {
		changed := c.el.Changed()
		ten := c.el.Tenure()
		if l := c.current(); l != nil && (ten == nil || ten != l.tenure || !l.t.Acting()) {
			c.endTerm(l, false, "leadership lost")
			c.stepDown()
			continue
		}
		var retry <-chan time.Time
		if c.current() == nil && ten != nil && (ten.Key != dead.key || ten.Epoch != dead.epoch) {
			if err := c.startTerm(ten); err != nil {
				c.log.Error("leading, but cannot load the pools from etcd; retrying", "err", err)
				retry = time.After(c.cfg.SessionTTL / 3)
			}
		}
		c.host.LeadershipChanged()
		select {
		case <-changed:
		case <-retry:
		case l := <-c.deposed:
			if l == c.current() {
				dead.key, dead.epoch = l.tenure.Key, l.tenure.Epoch
				c.endTerm(l, false, "a fenced write failed: another server leads")
			}
		case l := <-c.unsure:
			// etcd may hold a change this term's engine does not have,
			// or get it later (a write still in flight).
			if l == c.current() {
				c.endTerm(l, false, "a write to etcd got no answer: the next term restarts from what etcd holds")
				c.stepDown()
			}
		case <-c.quit:
			return
		}
	}
}

// stepDown gives up the session of a term that ended without a hand-off
// (its key goes), so that the next term, this server's or another's,
// starts under a new key once the old one is gone: a write of the ended
// term still in flight then cannot land (every write is fenced on the
// old key), and the next term restores what etcd holds from then on.
// Without it, a keep-alive answered after the deadline would have this
// server lead again under the same key, where a late write of the ended
// term could overwrite what the new term wrote.
func (c *Campaign) stepDown() {
	c.el.StepDown()
}

// startTerm has the host serve a new term, its engine restored from
// etcd, every write fenced on the leadership of the tenure ten, acting
// while the tenure is live.
func (c *Campaign) startTerm(ten *election.Tenure) error {
	l := &lead{tenure: ten}
	epoch := ten.Epoch
	st := etcdstore.New(c.cfg.Client, c.cfg.Prefix, etcdstore.Options{LeaderKey: ten.Key, LeaderRev: epoch, Leading: c.el.Leading,
		Deposed: func() {
			select {
			case c.deposed <- l:
			default:
			}
		},
		Unsure: func() {
			select {
			case c.unsure <- l:
			default:
			}
		}})
	t, err := c.host.StartTerm(0, st, epoch, ten.Live)
	if err != nil {
		return err
	}
	c.mu.Lock()
	l.t = t
	c.term = l
	c.mu.Unlock()
	t.Begin()
	c.changes.Add(1)
	c.host.RecordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s leads, epoch %d", c.cfg.Advertise, epoch)})
	return nil
}

// endTerm ends l's term: its engine acts no more, no call starts on it,
// its streams end (on its Done) and the host stops serving it.
func (c *Campaign) endTerm(l *lead, handOff bool, why string) {
	l.t.End()
	c.mu.Lock()
	c.term = nil
	c.mu.Unlock()
	c.host.EndTerm(0, l.t, handOff)
	c.changes.Add(1)
	c.host.LeadershipChanged()
	c.host.RecordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s stopped leading epoch %d: %s", c.cfg.Advertise, l.tenure.Epoch, why)})
}

// Stop ends the campaign: a term running is handed off (its final write
// made) and the session resigned, so that another server leads at once.
// It is idempotent.
func (c *Campaign) Stop() {
	c.stopped.Do(func() {
		close(c.quit)
		<-c.done
		if l := c.current(); l != nil {
			c.endTerm(l, true, "shutting down")
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTTL)
		defer cancel()
		if err := c.el.Resign(ctx); err != nil {
			c.log.Warn("could not resign; another server leads once the session expires", "err", err)
		}
	})
}

// Collectors are the leadership's metrics.
func (c *Campaign) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_leader",
			Help: "1 while this server leads its cluster, else 0."}, func() float64 {
			if c.Leading() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_leader_changes_total",
			Help: "Times this server started or stopped leading."}, func() float64 { return float64(c.changes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_leadership_remaining_seconds",
			Help: "Time left on this server's leadership deadline (0 when it does not lead)."}, func() float64 {
			if !c.Leading() {
				return 0
			}
			return c.el.Remaining().Seconds()
		}),
	}
}
