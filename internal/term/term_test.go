package term_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
)

func newTerm(t *testing.T, tenure func() bool) *term.Term {
	t.Helper()
	var acting func() bool
	tm, err := term.New(7, tenure, func(a func() bool) (*limiter.Engine, error) {
		acting = a
		return limiter.New(limiter.Options{Live: a}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm.Engine().Close)
	if acting == nil {
		t.Fatal("build was not given the term's Acting")
	}
	return tm
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A term leads from Begin while its tenure is live; Lapse stops it for
// good without ending it, End ends it.
func TestTermLifecycle(t *testing.T) {
	var live atomic.Bool
	live.Store(true)
	tm := newTerm(t, live.Load)
	if tm.Leading() || !tm.Acting() || tm.Epoch() != 7 {
		t.Fatalf("before Begin: leading %v acting %v epoch %d; want not leading, acting, epoch 7", tm.Leading(), tm.Acting(), tm.Epoch())
	}
	tm.Begin()
	if !tm.Leading() {
		t.Fatal("a begun term with a live tenure does not lead")
	}
	live.Store(false)
	if tm.Leading() || tm.Acting() {
		t.Fatal("a term whose tenure ended still leads")
	}
	live.Store(true)
	tm.Lapse()
	if tm.Leading() || tm.Acting() || closed(tm.Done()) {
		t.Fatalf("a lapsed term: leading %v acting %v done %v; want none", tm.Leading(), tm.Acting(), closed(tm.Done()))
	}
	tm.End()
	tm.End()
	if !closed(tm.Done()) || tm.Leading() {
		t.Fatal("an ended term is not done, or leads")
	}
}

// A standalone term (no tenure) leads from Begin until it ends.
func TestStandaloneTerm(t *testing.T) {
	tm := newTerm(t, nil)
	tm.Begin()
	if !tm.Leading() {
		t.Fatal("a begun standalone term does not lead")
	}
	tm.End()
	if tm.Leading() || tm.Acting() {
		t.Fatal("an ended standalone term leads")
	}
}

// A term that cannot build its engine does not exist.
func TestNewFails(t *testing.T) {
	boom := errors.New("boom")
	if _, err := term.New(1, nil, func(func() bool) (*limiter.Engine, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("New: %v; want %v", err, boom)
	}
}

// Current serves the term it was last given; terms are numbered in
// order.
func TestCurrentServesTheLastTerm(t *testing.T) {
	var cur term.Current
	first, next := newTerm(t, nil), newTerm(t, nil)
	cur.Serve(first)
	if cur.Get() != first {
		t.Fatal("Current does not serve the term it was given")
	}
	cur.Serve(next)
	if cur.Get() != next {
		t.Fatal("Current does not serve the next term")
	}
	if first.Seq() >= next.Seq() {
		t.Fatalf("seq %d then %d; want increasing", first.Seq(), next.Seq())
	}
	idle := term.Ended(first.Engine())
	if !closed(idle.Done()) || idle.Leading() || idle.Engine() != first.Engine() || idle.Seq() <= next.Seq() {
		t.Fatal("Ended is not an ended term of its engine with a new seq")
	}
}

// A table is idle while no shard serves a term that has not ended, and
// not idle from the first Serve of one until every shard's has ended.
func TestTableIdle(t *testing.T) {
	tb := term.NewTable(3)
	if tb.Len() != 3 || !closed(tb.Idle()) {
		t.Fatalf("a new table of %d shards: idle %v; want 3 shards, idle", tb.Len(), closed(tb.Idle()))
	}
	a, b := newTerm(t, nil), newTerm(t, nil)
	tb.Serve(0, a)
	tb.Serve(2, b)
	idle := tb.Idle()
	if closed(idle) {
		t.Fatal("a table serving two terms is idle")
	}
	a.End()
	tb.Serve(0, term.Ended(a.Engine()))
	if closed(idle) || closed(tb.Idle()) {
		t.Fatal("a table still serving one term is idle")
	}
	b.End()
	tb.Serve(2, term.Ended(b.Engine()))
	if !closed(idle) {
		t.Fatal("a table serving no term that has not ended is not idle")
	}
	c := newTerm(t, nil)
	tb.Serve(1, c)
	if closed(tb.Idle()) || tb.Shard(1).Get() != c || tb.Served()[1] != c {
		t.Fatal("a table serving a new term is still idle, or does not serve it")
	}
}

// Page merges the pages of several terms' engines in name order, and
// says there is more when one had more or some were cut.
func TestPage(t *testing.T) {
	var ts []*term.Term
	for _, names := range [][]string{{"a", "d", "e"}, {"b", "c"}, nil} {
		tm := newTerm(t, nil)
		for _, n := range names {
			if _, err := tm.Engine().CreatePool(limiter.PoolConfig{Name: n, ConcurrencyLimit: 1}); err != nil {
				t.Fatal(err)
			}
		}
		ts = append(ts, tm)
	}
	list := func(after string, limit int) ([]string, bool) {
		return term.Page(ts, limit, func(s string) string { return s }, func(eng *limiter.Engine) ([]string, bool) {
			infos, more := eng.ListPools(after, limit)
			var out []string
			for _, i := range infos {
				out = append(out, i.Config.Name)
			}
			return out, more
		})
	}
	var got []string
	after := ""
	for range 10 {
		page, more := list(after, 2)
		got = append(got, page...)
		if !more {
			break
		}
		after = page[len(page)-1]
	}
	if strings.Join(got, ",") != "a,b,c,d,e" {
		t.Fatalf("pages of 2 listed %v; want a to e once each, in order", got)
	}
}
