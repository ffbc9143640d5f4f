package cluster

import (
	"context"
	"errors"
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

const testTTL = 2 * time.Second

// fakeHost is a Host that records what the campaign tells it; its first
// failStarts StartTerms fail.
type fakeHost struct {
	mu         sync.Mutex
	failStarts int
	starts     int
	ends       []bool // handOff of each EndTerm
	events     []string
	changed    int
	live       func() bool
	term       *term.Term // the last term started
}

func (h *fakeHost) StartTerm(_ int, st *etcdstore.Store, epoch int64, tenure func() bool) (*term.Term, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts++
	if st == nil || tenure == nil || epoch == 0 {
		return nil, errors.New("StartTerm without a store, an epoch or a tenure")
	}
	if h.starts <= h.failStarts {
		return nil, errors.New("cannot load the pools")
	}
	t, err := term.New(epoch, tenure, func(acting func() bool) (*limiter.Engine, error) {
		return limiter.New(limiter.Options{Live: acting}), nil
	})
	if err != nil {
		return nil, err
	}
	h.live, h.term = t.Acting, t
	return t, nil
}

func (h *fakeHost) EndTerm(_ int, t *term.Term, handOff bool) {
	t.Engine().Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ends = append(h.ends, handOff)
}

func (h *fakeHost) LeadershipChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changed++
}

func (h *fakeHost) RecordEvent(ev events.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Type != events.LeaderChanged {
		panic("event of type " + ev.Type)
	}
	h.events = append(h.events, ev.Detail)
}

// read returns a copy of what h recorded.
func (h *fakeHost) read() (starts int, ends []bool, evs []string, changed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts, append([]bool(nil), h.ends...), append([]string(nil), h.events...), h.changed
}

func startCampaign(t *testing.T, h Host) *Campaign {
	t.Helper()
	c, _ := startCampaignOn(t, h)
	return c
}

// startCampaignOn starts a campaign on an etcd of its own, and returns it
// with that etcd.
func startCampaignOn(t *testing.T, h Host) (*Campaign, *etcdtest.Etcd) {
	t.Helper()
	e := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: election.DialOptions(testTTL)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	c := New(Config{Client: cli, Prefix: "/test/cluster/", SessionTTL: testTTL, Advertise: "10.0.0.1:7070"})
	if err := c.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c, e
}

func TestATermForTheLeadershipWon(t *testing.T) {
	h := &fakeHost{}
	c := startCampaign(t, h)
	testwait.For(t, "the campaign to lead", c.Leading)
	starts, ends, evs, changed := h.read()
	if starts != 1 || len(ends) != 0 || len(evs) != 1 || !strings.Contains(evs[0], "10.0.0.1:7070 leads") || changed == 0 {
		t.Fatalf("after winning: %d starts, ends %v, events %q, %d changes told", starts, ends, evs, changed)
	}
	if v := c.View(); v.Leader != "10.0.0.1:7070" || v.Self != v.Leader || v.Epoch == 0 || v.Remaining <= 0 {
		t.Fatalf("view of the leader: %+v", v)
	}
	h.mu.Lock()
	done := h.term.Done()
	h.mu.Unlock()
	select {
	case <-done:
		t.Fatal("the term is done while it runs")
	default:
	}
	if !h.live() {
		t.Fatal("the term's engine does not act while it leads")
	}

	c.Stop()
	<-done
	if _, ends, evs, _ = h.read(); len(ends) != 1 || !ends[0] || !strings.Contains(evs[len(evs)-1], "shutting down") {
		t.Fatalf("after Stop: ends %v (want one hand-off), events %q", ends, evs)
	}
	if c.Leading() || h.live() {
		t.Fatal("still leading, or the engine still acts, after Stop")
	}
}

func TestAFailedTermStartIsRetried(t *testing.T) {
	h := &fakeHost{failStarts: 1}
	c := startCampaign(t, h)
	testwait.For(t, "the campaign to lead after a failed start", c.Leading)
	if starts, _, evs, _ := h.read(); starts != 2 || len(evs) != 1 {
		t.Fatalf("%d starts and events %q; want a failed start, then one that led", starts, evs)
	}
}

func TestALapsedTermStopsActing(t *testing.T) {
	h := &fakeHost{}
	c := startCampaign(t, h)
	testwait.For(t, "the campaign to lead", c.Leading)
	_, _, _, before := h.read()
	c.Lapse()
	if c.Leading() || h.live() {
		t.Fatal("leading, or the engine acting, after its term lapsed")
	}
	if _, _, _, after := h.read(); after == before {
		t.Fatal("the host was not told the leadership changed")
	}
}

// A term that ends without a hand-off (here it lapses, as at its
// deadline, while the session lives on in etcd) is followed by one under a
// new key, once the old key is gone: a write of the ended term still in
// flight, fenced on the old key, cannot land after the next term restored
// what etcd holds.
func TestATermEndedWithoutHandOffIsFollowedUnderANewKey(t *testing.T) {
	h := &fakeHost{}
	c, etcd := startCampaignOn(t, h)
	testwait.For(t, "the campaign to lead", c.Leading)
	first := c.View().Epoch
	c.Lapse()
	// Another member's key (without a session) makes the campaign look
	// again, at once; it goes once the term has ended.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	other := "/test/cluster/election/zz"
	if _, err := cli.Put(context.Background(), other, "10.0.0.9:7070"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the lapsed term to end", func() bool { _, ends, _, _ := h.read(); return len(ends) == 1 })
	if _, err := cli.Delete(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the campaign to lead again", c.Leading)
	if v := c.View(); v.Epoch <= first {
		t.Fatalf("led again at epoch %d; want a new key, with an epoch after %d", v.Epoch, first)
	}
	if starts, ends, _, _ := h.read(); starts != 2 || len(ends) != 1 || ends[0] {
		t.Fatalf("%d starts and ends %v; want a second term after the first ended without a hand-off", starts, ends)
	}
}
