// Package cluster runs the leadership terms of a server of a cluster of
// servers sharing etcd (serve --etcd): its campaign over internal/election;
// a term for each leadership it wins, on a store whose writes are fenced
// on that leadership; whether it leads now (Leading, View); the
// leadership's metrics and events; and the NOT_LEADER status with which a
// server that does not lead answers.
//
// The server serves the terms: it is the campaign's Host, told when a
// term starts (to build an engine on the term's store, restore it and
// serve it) and when it ends. The package may import internal/election,
// internal/events, internal/refuse, apierr, server/store/etcdstore, etcd's
// client and Prometheus; nothing of the server.
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
}

// Host serves a Campaign's terms. The Campaign calls StartTerm, EndTerm
// and RecordEvent from one goroutine at a time, a term's EndTerm after
// its StartTerm; LeadershipChanged also from the goroutine that sees a
// leadership deadline pass.
type Host interface {
	// StartTerm builds an engine writing to st (the term's store, every
	// write fenced on the leadership) and acting while live says so (the
	// engine's Options.Live: false from the leadership deadline on, or
	// once the term ends, for good), restores it from st and serves it.
	// The term does not start when it fails; the Campaign retries.
	StartTerm(st *etcdstore.Store, live func() bool) error
	// EndTerm stops serving the term's engine: its waiting calls fail
	// and it closes, after its final write (the pools that hold nothing,
	// which then need no recovery window) when handOff. No pools are
	// served until the next StartTerm.
	EndTerm(handOff bool)
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
	deposed chan *term // a term whose fenced write failed
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
	changes atomic.Int64 // leadership gained or lost

	mu   sync.Mutex
	term *term // nil while not leading
}

// term is one leadership term: one tenure of the election, served by one
// engine.
type term struct {
	tenure *election.Tenure
	done   chan struct{}
	live   atomic.Bool // served: from StartTerm's success to the term's end or Lapse
	frozen atomic.Bool // ended or lapsed: its engine acts no more
}

// acting reports whether the term's engine may act: the term was not
// ended and its tenure is live (its deadline ahead). Once false, always.
func (t *term) acting() bool { return !t.frozen.Load() && t.tenure.Live() }

// New returns a Campaign that has not started: it does not lead.
func New(cfg Config) *Campaign {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Campaign{cfg: cfg, log: log, deposed: make(chan *term, 1), quit: make(chan struct{}), done: make(chan struct{})}
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
// is served and acting (its tenure's deadline ahead, by the monotonic
// clock, read now).
func (c *Campaign) Leading() bool {
	t := c.current()
	return t != nil && t.live.Load() && t.acting()
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

// Election is the campaign's election.
func (c *Campaign) Election() *election.Election { return c.el }

// TermDone is closed when the current term ends (already closed when none
// runs): streams end on it.
func (c *Campaign) TermDone() <-chan struct{} {
	if t := c.current(); t != nil {
		return t.done
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Lapse makes the current term stop leading without ending it, as its
// leadership deadline does before the campaign ends the term: its engine
// freezes and health is told. For tests of that moment.
func (c *Campaign) Lapse() {
	if t := c.current(); t != nil {
		t.frozen.Store(true)
		t.live.Store(false)
		c.host.LeadershipChanged()
	}
}

func (c *Campaign) current() *term {
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
		if t := c.current(); t != nil && (ten == nil || ten != t.tenure || !t.acting()) {
			c.endTerm(t, false, "leadership lost")
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
		case t := <-c.deposed:
			if t == c.current() {
				dead.key, dead.epoch = t.tenure.Key, t.tenure.Epoch
				c.endTerm(t, false, "a fenced write failed: another server leads")
			}
		case <-c.quit:
			return
		}
	}
}

// startTerm has the host serve a new engine restored from etcd, every
// write fenced on the leadership of the tenure ten, the engine acting
// while the tenure is live.
func (c *Campaign) startTerm(ten *election.Tenure) error {
	t := &term{tenure: ten, done: make(chan struct{})}
	epoch := ten.Epoch
	st := etcdstore.New(c.cfg.Client, c.cfg.Prefix, etcdstore.Options{LeaderKey: ten.Key, LeaderRev: epoch, Leading: c.el.Leading,
		Deposed: func() {
			select {
			case c.deposed <- t:
			default:
			}
		}})
	if err := c.host.StartTerm(st, t.acting); err != nil {
		return err
	}
	c.mu.Lock()
	c.term = t
	c.mu.Unlock()
	t.live.Store(true)
	c.changes.Add(1)
	c.host.RecordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s leads, epoch %d", c.cfg.Advertise, epoch)})
	return nil
}

// endTerm stops serving t: no call starts on it, its streams end (on
// TermDone) and the host stops serving its engine.
func (c *Campaign) endTerm(t *term, handOff bool, why string) {
	t.frozen.Store(true) // first: its engine acts no more
	t.live.Store(false)
	c.mu.Lock()
	c.term = nil
	c.mu.Unlock()
	close(t.done)
	c.host.EndTerm(handOff)
	c.changes.Add(1)
	c.host.LeadershipChanged()
	c.host.RecordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s stopped leading epoch %d: %s", c.cfg.Advertise, t.tenure.Epoch, why)})
}

// Stop ends the campaign: a term running is handed off (its final write
// made) and the session resigned, so that another server leads at once.
// It is idempotent.
func (c *Campaign) Stop() {
	c.stopped.Do(func() {
		close(c.quit)
		<-c.done
		if t := c.current(); t != nil {
			c.endTerm(t, true, "shutting down")
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
