package election

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/internal/etcdtest"
)

const (
	testTTL   = 2 * time.Second
	waitLimit = 20 * time.Second
	prefix    = "/test/election/"
)

func newClient(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(), DialOptions: DialOptions(testTTL)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func start(t *testing.T, cfg Config) *Election {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = prefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = testTTL
	}
	e, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// waitFor waits, through Changed, until cond holds for e.
func waitFor(t *testing.T, e *Election, what string, cond func() bool) {
	t.Helper()
	waitForAny(t, []*Election{e}, what, cond)
}

// waitForAny waits until cond holds, looking again at every change of any
// of es.
func waitForAny(t *testing.T, es []*Election, what string, cond func() bool) {
	t.Helper()
	limit := time.After(waitLimit)
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(limit)}}
		for _, e := range es {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.Changed())})
		}
		if cond() {
			return
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("%s: not within %v (view %+v, leading %v)", what, waitLimit, es[0].View(), es[0].Leading())
		}
	}
}

// oneLeader waits until exactly one of es leads, and returns it.
func oneLeader(t *testing.T, es []*Election, what string) *Election {
	t.Helper()
	var lead *Election
	waitForAny(t, es, what, func() bool {
		n := 0
		for _, e := range es {
			if e.Leading() {
				n++
				lead = e
			}
		}
		return n == 1
	})
	return lead
}

// threeServers starts three campaigns and waits until one leads and all
// see it.
func threeServers(t *testing.T, c *clientv3.Client) []*Election {
	t.Helper()
	var es []*Election
	for _, a := range []string{"a:1", "b:2", "c:3"} {
		es = append(es, start(t, Config{Client: c, Advertise: a}))
	}
	for _, e := range es {
		waitFor(t, e, "a leader seen by all and three members", func() bool {
			v := e.View()
			return v.Leader != "" && len(v.Members) == 3
		})
	}
	return es
}

func TestOneLeader(t *testing.T) {
	c := newClient(t, etcdtest.Start(t).Endpoint())
	es := threeServers(t, c)
	lead := oneLeader(t, es, "someone leads")
	v := lead.View()
	if v.Leader != lead.cfg.Advertise || v.Epoch <= 0 || v.Members[0] != v.Leader {
		t.Fatalf("leader %s sees %+v", lead.cfg.Advertise, v)
	}
	key, epoch, ok := lead.Term()
	if !ok || epoch != v.Epoch || key == "" {
		t.Fatalf("Term() = %q, %d, %v; view %+v", key, epoch, ok, v)
	}
	for _, e := range es {
		if w := e.View(); w.Leader != v.Leader || w.Epoch != v.Epoch {
			t.Errorf("%s sees leader %s epoch %d, want %s %d", e.cfg.Advertise, w.Leader, w.Epoch, v.Leader, v.Epoch)
		}
		if e != lead && (e.Remaining() != 0 || e.Leading()) {
			t.Errorf("follower %s: leading %v, remaining %v", e.cfg.Advertise, e.Leading(), e.Remaining())
		}
	}
	if r := lead.Remaining(); r <= 0 || r > testTTL {
		t.Errorf("leader's remaining time %v, want in (0, %v]", r, testTTL)
	}
}

// flakyKeepAlive fails keep-alives while failing is set, and records the
// send time of the last one that succeeded.
type flakyKeepAlive struct {
	c        *clientv3.Client
	mu       sync.Mutex
	failing  int // keep-alives still to fail; <0: all
	failed   int
	lastSent time.Time
}

func (f *flakyKeepAlive) keepAlive(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	f.mu.Lock()
	if f.failing != 0 {
		f.failing--
		f.failed++
		f.mu.Unlock()
		return nil, errors.New("injected keep-alive failure")
	}
	sent := time.Now()
	f.mu.Unlock()
	resp, err := f.c.KeepAliveOnce(ctx, id)
	if err == nil {
		f.mu.Lock()
		f.lastSent = sent
		f.mu.Unlock()
	}
	return resp, err
}

func (f *flakyKeepAlive) set(failing int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing, f.failed = failing, 0
}

func (f *flakyKeepAlive) state() (failed int, lastSent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed, f.lastSent
}

// A failed keep-alive does not end leadership while the deadline is
// ahead; keep-alives failing past the deadline end it, not earlier.
func TestDeadline(t *testing.T) {
	c := newClient(t, etcdtest.Start(t).Endpoint())
	f := &flakyKeepAlive{c: c}
	e := start(t, Config{Client: c, Advertise: "a:1", keepAlive: f.keepAlive})
	waitFor(t, e, "leads", e.Leading)

	f.set(1)
	limit := time.After(waitLimit)
	for {
		failed, last := f.state()
		if failed == 1 && time.Since(last) > testTTL/3 {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-limit:
			t.Fatal("the injected failure did not happen")
		}
	}
	if !e.Leading() {
		t.Fatal("one failed keep-alive ended leadership")
	}

	f.set(-1)
	waitFor(t, e, "leadership lost at the deadline", func() bool { return !e.Leading() })
	_, last := f.state()
	if held := time.Since(last); held < testTTL-e.margin {
		t.Fatalf("leadership ended %v after the last renewal sent, before its deadline (%v)", held, testTTL-e.margin)
	}
	if e.Remaining() != 0 {
		t.Fatalf("Remaining() = %v after the deadline", e.Remaining())
	}
	if _, _, ok := e.Term(); ok {
		t.Fatal("Term() still reports a term")
	}
	f.set(0)
	waitFor(t, e, "leads again once keep-alives succeed", e.Leading)
}

// Leadership ends by the deadline when etcd stops, and no one leads.
func TestEtcdStopped(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := newClient(t, etcd.Endpoint())
	es := threeServers(t, c)
	lead := oneLeader(t, es, "someone leads")
	stopping := time.Now()
	etcd.Stop()
	stopped := time.Now()
	waitFor(t, lead, "leadership lost", func() bool { return !lead.Leading() })
	if d := time.Since(stopped); d > testTTL {
		t.Fatalf("the leader still led %v after etcd stopped (it took %v to stop); its deadline is under %v", d, stopped.Sub(stopping), testTTL)
	}
	for _, e := range es {
		if e.Leading() {
			t.Fatalf("%s leads with etcd stopped", e.cfg.Advertise)
		}
	}
	etcd.Restart()
	oneLeader(t, es, "someone leads after etcd is back")
}

// A leader that stops without resigning is replaced once etcd expires its
// session; one that resigns, at once. The epoch grows.
func TestTakeover(t *testing.T) {
	c := newClient(t, etcdtest.Start(t).Endpoint())
	es := threeServers(t, c)
	lead := oneLeader(t, es, "someone leads")
	epoch := lead.View().Epoch
	rest := func(gone *Election) []*Election {
		var r []*Election
		for _, e := range es {
			if e != gone {
				r = append(r, e)
			}
		}
		return r
	}

	// Killed: Close leaves the key until the session expires.
	killed := time.Now()
	lead.Close()
	es = rest(lead)
	lead = oneLeader(t, es, "a follower takes over")
	took := time.Since(killed)
	t.Logf("take-over after Close without resign: %v", took)
	if took < testTTL-lead.margin {
		t.Fatalf("a follower led %v after the leader stopped, before the old deadline could pass", took)
	}
	if v := lead.View(); v.Epoch <= epoch || len(v.Members) != 2 {
		t.Fatalf("after take-over %+v, want epoch above %d and two members", v, epoch)
	}
	epoch = lead.View().Epoch

	// Resigned: the other takes over well under a TTL.
	resigned := time.Now()
	if err := lead.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	es = rest(lead)
	waitFor(t, es[0], "the last follower takes over", es[0].Leading)
	took = time.Since(resigned)
	t.Logf("take-over after Resign: %v", took)
	if took > testTTL/2 {
		t.Fatalf("take-over after resign took %v", took)
	}
	if v := es[0].View(); v.Epoch <= epoch || len(v.Members) != 1 {
		t.Fatalf("after resign %+v", v)
	}
}

func TestConfigErrors(t *testing.T) {
	c := newClient(t, etcdtest.Start(t).Endpoint())
	for _, cfg := range []Config{
		{Client: c, Prefix: prefix},
		{Client: c, Prefix: prefix, Advertise: "a", TTL: 1500 * time.Millisecond},
		{Client: c, Prefix: prefix, Advertise: "a", TTL: 2 * time.Second, Margin: 2 * time.Second},
	} {
		if _, err := Start(cfg); err == nil {
			t.Errorf("Start(%+v) = nil error", cfg)
		}
	}
}

// A tenure ends at its deadline by its timer, telling Ended at once; a
// keep-alive answered after the deadline starts a new tenure and does
// not revive the old one.
func TestTenureEndsAtTheDeadline(t *testing.T) {
	ended := make(chan *Tenure, 2)
	e := newElection(Config{TTL: time.Second, Ended: func(t *Tenure) { ended <- t }}, 250*time.Millisecond, 1)
	e.lease = 1
	k := e.shardKey(0, 1)
	e.shard[0].queue = []key{{name: k, addr: "a", lease: 1, rev: 7}}
	renew := func(sent time.Time) {
		e.mu.Lock()
		gone := e.renewedLocked(sent, time.Second)
		e.mu.Unlock()
		e.ended(gone)
	}
	renew(time.Now()) // the deadline is 750ms ahead
	first := e.Tenure()
	if first == nil || !first.Live() || first.Key != k || first.Epoch != 7 {
		t.Fatalf("tenure %+v after a renewal; want a live one of k, epoch 7", first)
	}
	select {
	case got := <-ended:
		if got != first {
			t.Fatalf("Ended told of %p, want %p", got, first)
		}
	case <-time.After(waitLimit):
		t.Fatal("the deadline's timer did not end the tenure")
	}
	if first.Live() || e.Leading() {
		t.Fatal("live past its deadline")
	}
	select {
	case <-first.Done():
	default:
		t.Fatal("Done not closed at the end")
	}
	renew(time.Now()) // a late answer: the session lives on, in a new tenure
	second := e.Tenure()
	if second == nil || second == first || first.Live() || !e.Leading() {
		t.Fatalf("after a late renewal: tenure %p (first %p, live %v)", second, first, first.Live())
	}
	e.mu.Lock()
	e.timer.Stop()
	e.mu.Unlock()
}

// A leader that steps down stops leading at once, and leads again only
// under a new session: a new key with a later create revision, after the
// old key is gone (so no write fenced on the old key can land then).
func TestStepDownLeadsAgainUnderANewKey(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := newClient(t, etcd.Endpoint())
	e := start(t, Config{Client: c, Advertise: "a"})
	waitFor(t, e, "a leads", e.Leading)
	old := e.Tenure()
	e.StepDown()
	if e.Leading() || old.Live() {
		t.Fatal("still leading right after StepDown")
	}
	waitFor(t, e, "a leads again", e.Leading)
	now := e.Tenure()
	if now.Key == old.Key || now.Epoch <= old.Epoch {
		t.Fatalf("led again under key %s epoch %d; want a new key with a later epoch than %s %d", now.Key, now.Epoch, old.Key, old.Epoch)
	}
	resp, err := c.Get(context.Background(), old.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("the old key %s is still there while the new one leads", old.Key)
	}
}
