package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server/store/etcdstore"
)

// ledger checks the terms of every campaign of a cluster against each
// other: a shard's term starts only once the one before it, whoever ran
// it, no longer acts (its tenure is over and its EndTerm was called), and
// its epochs grow. It measures how long a planned move takes: from the
// predecessor's EndTerm with a hand-off to the successor's StartTerm
// returning.
type ledger struct {
	mu     sync.Mutex
	held   map[int]*heldTerm // shard → its term now
	epochs map[int]int64     // shard → the last epoch started
	handed map[int]time.Time // shard → when its last term ended with a hand-off
	moves  []time.Duration
	errs   []string
}

type heldTerm struct {
	by     string
	tenure func() bool
	ended  bool
}

func newLedger() *ledger {
	return &ledger{held: map[int]*heldTerm{}, epochs: map[int]int64{}, handed: map[int]time.Time{}}
}

func (l *ledger) failf(format string, args ...any) {
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

// check fails t with the violations found.
func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
}

func (l *ledger) moveTimes() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.moves)
}

// shardHost is a campaign's Host in a cluster whose terms a ledger checks.
type shardHost struct {
	addr string
	l    *ledger

	mu      sync.Mutex
	terms   map[int]*term.Term
	starts  int
	ends    int
	handOff int
}

func (h *shardHost) StartTerm(shard int, st *etcdstore.Store, epoch int64, tenure func() bool) (*term.Term, error) {
	h.l.mu.Lock()
	if p := h.l.held[shard]; p != nil && (!p.ended || p.tenure()) {
		h.l.failf("shard %d: %s starts epoch %d while %s's term acts (ended %v, tenure live %v)", shard, h.addr, epoch, p.by, p.ended, p.tenure())
	}
	if epoch <= h.l.epochs[shard] {
		h.l.failf("shard %d: %s starts epoch %d, not above %d", shard, h.addr, epoch, h.l.epochs[shard])
	}
	h.l.epochs[shard] = epoch
	h.l.held[shard] = &heldTerm{by: h.addr, tenure: tenure}
	handed, moved := h.l.handed[shard]
	delete(h.l.handed, shard)
	h.l.mu.Unlock()
	t, err := term.New(epoch, tenure, func(acting func() bool) (*limiter.Engine, error) {
		if _, _, err := st.LoadOrSeed(nil); err != nil {
			return nil, err
		}
		return limiter.New(limiter.Options{Live: acting}), nil
	})
	if err != nil {
		return nil, err
	}
	if moved {
		h.l.mu.Lock()
		h.l.moves = append(h.l.moves, time.Since(handed))
		h.l.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.terms[shard] = t
	h.starts++
	return t, nil
}

func (h *shardHost) EndTerm(shard int, t *term.Term, handOff bool) {
	now := time.Now()
	t.Engine().Close()
	h.l.mu.Lock()
	if p := h.l.held[shard]; p == nil || p.by != h.addr {
		h.l.failf("shard %d: %s ends a term it does not hold", shard, h.addr)
	} else {
		p.ended = true
	}
	if handOff {
		h.l.handed[shard] = now
	} else {
		delete(h.l.handed, shard)
	}
	h.l.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.terms, shard)
	h.ends++
	if handOff {
		h.handOff++
	}
}

func (h *shardHost) LeadershipChanged() {}

func (h *shardHost) RecordEvent(ev events.Event) {
	if ev.Type != events.LeaderChanged {
		panic("event of type " + ev.Type)
	}
}

func (h *shardHost) counts() (starts, ends, handOff int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts, h.ends, h.handOff
}

// shardCluster is campaigns of one cluster on one etcd.
type shardCluster struct {
	t      *testing.T
	etcd   *etcdtest.Etcd
	shards int
	l      *ledger
	cs     map[string]*Campaign
	hosts  map[string]*shardHost
}

func newShardCluster(t *testing.T, shards int) *shardCluster {
	return &shardCluster{t: t, etcd: etcdtest.Start(t), shards: shards, l: newLedger(), cs: map[string]*Campaign{}, hosts: map[string]*shardHost{}}
}

func (sc *shardCluster) client() *clientv3.Client {
	sc.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{sc.etcd.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: election.DialOptions(testTTL)})
	if err != nil {
		sc.t.Fatal(err)
	}
	sc.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func (sc *shardCluster) start(addr string) *Campaign {
	sc.t.Helper()
	h := &shardHost{addr: addr, l: sc.l, terms: map[int]*term.Term{}}
	var lg *slog.Logger
	if os.Getenv("SHARDLOG") != "" {
		lg = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("self", addr)
	}
	c := New(Config{Client: sc.client(), Prefix: "/test/shards/", SessionTTL: testTTL, Advertise: addr, Shards: sc.shards, Logger: lg})
	if err := c.Start(h); err != nil {
		sc.t.Fatal(err)
	}
	sc.t.Cleanup(c.Stop)
	sc.cs[addr], sc.hosts[addr] = c, h
	return c
}

// balanced reports whether every shard is led by exactly one of the
// campaigns, each leading its share (at most ceil(N/M)), and every
// campaign's map agrees.
func (sc *shardCluster) balanced() bool {
	limit := (sc.shards + len(sc.cs) - 1) / len(sc.cs)
	for i := range sc.shards {
		n := 0
		for _, c := range sc.cs {
			if c.Leads(i) {
				n++
			}
		}
		if n != 1 {
			return false
		}
	}
	for a, c := range sc.cs {
		if c.Led() > limit {
			return false
		}
		for _, o := range c.Map() {
			if o.Owner == "" || !sc.cs[o.Owner].Leads(o.Shard) {
				return false
			}
		}
		_ = a
	}
	return true
}

// waitBalanced waits until sc is balanced; it fails t with each shard's
// state when it is not within testwait.Limit.
func (sc *shardCluster) waitBalanced(what string) {
	sc.t.Helper()
	limit := time.Now().Add(testwait.Limit)
	for !sc.balanced() {
		if time.Now().After(limit) {
			for i := range sc.shards {
				var leads, seen []string
				for a, c := range sc.cs {
					if c.Leads(i) {
						leads = append(leads, a)
					}
					v := c.Election().View().Shards[i]
					seen = append(seen, fmt.Sprintf("%s sees %s (epoch %d) desired %s, tenure %v", a, v.Leader, v.Epoch, v.Desired, c.Election().ShardTenure(i) != nil))
				}
				resp, _ := sc.client().Get(context.Background(), fmt.Sprintf("/test/shards/shards/%d/", i), clientv3.WithPrefix())
				var keys []string
				for _, kv := range resp.Kvs {
					keys = append(keys, fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.CreateRevision))
				}
				sc.t.Logf("shard %d: led by %v; %v; keys %v", i, leads, seen, keys)
			}
			sc.t.Fatalf("%s: not within %v (loads %v)", what, testwait.Limit, sc.loads())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (sc *shardCluster) loads() map[string]int {
	m := map[string]int{}
	for a, c := range sc.cs {
		m[a] = c.Led()
	}
	return m
}

// Two, then three campaigns share the shards evenly; the third takes its
// share by planned moves, each successor starting only after its
// predecessor ended its term with a hand-off; a campaign that stops hands
// every shard off; one that dies loses its shards when its session
// expires, to the survivor.
func TestShardsBalanceAndMove(t *testing.T) {
	const shards = 12
	sc := newShardCluster(t, shards)
	sc.start("10.0.0.1:7070")
	sc.start("10.0.0.2:7070")
	sc.waitBalanced("two campaigns to share the shards")
	t.Logf("two servers: %v", sc.loads())
	sc.l.check(t)

	joined := time.Now()
	third := sc.start("10.0.0.3:7070")
	sc.waitBalanced("three campaigns to share the shards")
	t.Logf("three servers: %v (after %v)", sc.loads(), time.Since(joined))
	if third.Led() == 0 {
		t.Fatal("the third server took no shard")
	}
	moves := sc.l.moveTimes()
	var moved int
	for _, h := range sc.hosts {
		_, _, n := h.counts()
		moved += n
	}
	if len(moves) < third.Led() || moved < third.Led() {
		t.Fatalf("%d planned moves measured, %d hand-offs; the third server leads %d shards", len(moves), moved, third.Led())
	}
	slices.Sort(moves)
	t.Logf("planned moves: %d; hand-off → successor's term started: median %v, max %v", len(moves), moves[len(moves)/2], moves[len(moves)-1])
	sc.l.check(t)

	// SIGTERM: every shard of the stopped server is handed off.
	stopped := sc.cs["10.0.0.1:7070"]
	_, endsBefore, handBefore := sc.hosts["10.0.0.1:7070"].counts()
	led := stopped.Led()
	stopAt := time.Now()
	stopped.Stop()
	delete(sc.cs, "10.0.0.1:7070")
	sc.waitBalanced("two campaigns to share the shards after a stop")
	t.Logf("after a stop (%d shards handed off): %v, in %v", led, sc.loads(), time.Since(stopAt))
	if _, ends, hand := sc.hosts["10.0.0.1:7070"].counts(); ends-endsBefore != led || hand-handBefore != led {
		t.Fatalf("Stop ended %d terms, %d with a hand-off; it led %d", ends-endsBefore, hand-handBefore, led)
	}
	sc.l.check(t)

	// kill -9: the survivor takes every shard once the session expires.
	dead := sc.cs["10.0.0.2:7070"]
	died := time.Now()
	dead.Close()
	delete(sc.cs, "10.0.0.2:7070")
	sc.waitBalanced("the survivor to lead every shard")
	took := time.Since(died)
	t.Logf("after a death: %v, in %v", sc.loads(), took)
	if took < testTTL*3/4 {
		t.Fatalf("the survivor led every shard %v after the death, before the dead session's deadline could pass", took)
	}
	sc.l.check(t)
}

// With one shard, a second campaign does not take the shard from the
// first (no move): it waits behind it, as a follower of a cluster of one
// leader does, and leads at once when the first stops.
func TestOneShardStaysWithItsLeader(t *testing.T) {
	sc := newShardCluster(t, 1)
	first := sc.start("10.0.0.9:7070")
	testwait.For(t, "the first to lead", first.Leading)
	second := sc.start("10.0.0.1:7070")
	testwait.For(t, "the second to campaign", func() bool { return len(second.View().Members) == 2 && second.View().Leader != "" })
	if !first.Leading() || second.Leading() {
		t.Fatal("the shard moved to the second campaign")
	}
	stopAt := time.Now()
	first.Stop()
	delete(sc.cs, "10.0.0.9:7070")
	testwait.For(t, "the second to lead", second.Leading)
	t.Logf("hand-off to the follower: %v", time.Since(stopAt))
	if _, _, hand := sc.hosts["10.0.0.9:7070"].counts(); hand != 1 {
		t.Fatalf("%d hand-offs; want 1", hand)
	}
	sc.l.check(t)
}

func TestLoadShardCount(t *testing.T) {
	sc := newShardCluster(t, 1)
	cli := sc.client()
	ctx := context.Background()
	n, err := LoadShardCount(ctx, cli, "/a/", 8, nil)
	if err != nil || n != 8 {
		t.Fatalf("first server: %d, %v; want 8", n, err)
	}
	if n, err = LoadShardCount(ctx, cli, "/a/", 16, nil); err != nil || n != 8 {
		t.Fatalf("a later server asking 16: %d, %v; want the stored 8", n, err)
	}
	// Pools stored before shards existed: one shard.
	if _, err := cli.Put(ctx, "/b/meta/initialized", "x"); err != nil {
		t.Fatal(err)
	}
	if n, err = LoadShardCount(ctx, cli, "/b/", 8, nil); err != nil || n != 1 {
		t.Fatalf("a cluster from before shards: %d, %v; want 1", n, err)
	}
	if resp, err := cli.Get(ctx, "/b/meta/shards"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("meta/shards of a cluster from before shards: %v, %v; want 1 stored", resp, err)
	}
	for _, bad := range []string{"0", "4097", "x", "-1"} {
		if _, err := cli.Put(ctx, "/c/meta/shards", bad); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadShardCount(ctx, cli, "/c/", 8, nil); err == nil || !strings.Contains(err.Error(), "damaged shard count") {
			t.Errorf("stored %q: err %v; want it refused", bad, err)
		}
	}
	if _, err := LoadShardCount(ctx, cli, "/d/", 0, nil); err == nil {
		t.Error("0 shards asked for: no error")
	}
}

// A term that ends without a hand-off while the session lives (here its
// key was deleted behind its back) is followed by one under a new key, in
// that shard only: the other shards' terms go on.
func TestATermLostEndsItsShardOnly(t *testing.T) {
	sc := newShardCluster(t, 4)
	c := sc.start("10.0.0.1:7070")
	sc.waitBalanced("the campaign to lead every shard")
	h := sc.hosts["10.0.0.1:7070"]
	h.mu.Lock()
	others := map[int]*term.Term{0: h.terms[0], 2: h.terms[2], 3: h.terms[3]}
	h.mu.Unlock()
	lost := c.Election().ShardTenure(1)
	if _, err := sc.client().Delete(context.Background(), lost.Key); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "shard 1 led again under a new key", func() bool {
		ten := c.Election().ShardTenure(1)
		return c.Leads(1) && ten != nil && ten.Epoch > lost.Epoch
	})
	starts, ends, handOff := h.counts()
	if starts != 5 || ends != 1 || handOff != 0 {
		t.Fatalf("%d starts, %d ends (%d hand-offs); want shard 1's term ended and started again, alone", starts, ends, handOff)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, tm := range others {
		if h.terms[i] != tm || !tm.Leading() {
			t.Errorf("shard %d's term was replaced or stopped leading", i)
		}
	}
	sc.l.check(t)
}

// How long planned moves take when a fourth server joins three on 64
// shards: from the predecessor's EndTerm with a hand-off (its decision)
// to the successor's StartTerm returning. Logged, not asserted: the
// target (200 ms) is measured in docs/ha.md, not in a unit test.
func TestPlannedMoveTimes(t *testing.T) {
	const shards = 64
	sc := newShardCluster(t, shards)
	for i := 1; i <= 3; i++ {
		sc.start(fmt.Sprintf("10.0.0.%d:7070", i))
	}
	sc.waitBalanced("three campaigns to share the shards")
	before := len(sc.l.moveTimes())
	joined := time.Now()
	sc.start("10.0.0.4:7070")
	sc.waitBalanced("four campaigns to share the shards")
	took := time.Since(joined)
	moves := sc.l.moveTimes()[before:]
	if len(moves) == 0 {
		t.Fatal("no planned move")
	}
	slices.Sort(moves)
	t.Logf("%d shards, 3 → 4 servers: %v; %d planned moves in %v; each: median %v, 90th %v, max %v", shards, sc.loads(), len(moves), took,
		moves[len(moves)/2], moves[len(moves)*9/10], moves[len(moves)-1])
	sc.l.check(t)
}
