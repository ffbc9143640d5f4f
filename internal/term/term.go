// Package term is the unit in which a server serves pools: a Term is one
// span during which the server serves them from one engine, started when
// it begins to lead (a standalone server: when it starts) and ended when
// it stops, for good. A call or a stream takes the term served when it
// starts (Current.Get) and uses that term's engine and leadership
// throughout; when the term ends, its streams end (Done) and its engine
// acts no more, while new calls get the next term.
//
// It may import the engine (limiter); nothing of the server.
package term

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// seqs numbers the terms of the process.
var seqs atomic.Uint64

// Term is one term: its engine, its leadership (the epoch and whether its
// tenure is live) and its end. Its methods are safe for concurrent use.
type Term struct {
	seq    uint64
	epoch  int64
	eng    *limiter.Engine
	tenure func() bool // nil: lives until it ends
	served atomic.Bool // from Begin to Lapse or End
	frozen atomic.Bool // lapsed or ended: its engine acts no more
	end    sync.Once
	done   chan struct{}
}

// New returns a term of the leadership of epoch (0 for a standalone
// server) that acts while tenure says so (nil: until it ends), served by
// the engine build returns; build is given the term's Acting (for the
// engine's Options.Live). The term leads once Begin is called.
func New(epoch int64, tenure func() bool, build func(acting func() bool) (*limiter.Engine, error)) (*Term, error) {
	t := &Term{seq: seqs.Add(1), epoch: epoch, tenure: tenure, done: make(chan struct{})}
	eng, err := build(t.Acting)
	if err != nil {
		return nil, err
	}
	t.eng = eng
	return t, nil
}

// Ended returns a term that has ended, served by eng (closed, without
// pools): what a server of a cluster serves between two terms.
func Ended(eng *limiter.Engine) *Term {
	t := &Term{seq: seqs.Add(1), eng: eng, done: make(chan struct{})}
	t.End()
	return t
}

// Engine is the term's engine.
func (t *Term) Engine() *limiter.Engine { return t.eng }

// Epoch is the epoch of the term's leadership; 0 for a standalone server.
func (t *Term) Epoch() int64 { return t.epoch }

// Seq tells the terms of one process apart: each has its own, and a later
// term a larger one.
func (t *Term) Seq() uint64 { return t.seq }

// Begin makes the term lead: it is served, and leads while it acts.
func (t *Term) Begin() { t.served.Store(true) }

// Acting reports whether the term's engine may act: the term has not
// lapsed or ended, and its tenure is live. Once false, always.
func (t *Term) Acting() bool { return !t.frozen.Load() && (t.tenure == nil || t.tenure()) }

// Leading reports whether the term leads now: it has begun and acts.
func (t *Term) Leading() bool { return t.served.Load() && t.Acting() }

// Lapse makes the term stop leading without ending it, as the leadership
// deadline does before the term is ended: its engine freezes.
func (t *Term) Lapse() {
	t.frozen.Store(true)
	t.served.Store(false)
}

// End ends the term for good: it stops leading and Done is closed. It is
// idempotent.
func (t *Term) End() {
	t.end.Do(func() {
		t.Lapse()
		close(t.done)
	})
}

// Done is closed when the term ends: its streams end on it.
func (t *Term) Done() <-chan struct{} { return t.done }

// Current is the term a server serves now: the one a call or a stream
// that starts takes. The zero value serves none; Serve one before the
// first Get.
type Current struct{ p atomic.Pointer[Term] }

// Get returns the term served now.
func (c *Current) Get() *Term { return c.p.Load() }

// Serve makes t the term served to the calls that start from now on.
func (c *Current) Serve(t *Term) { c.p.Store(t) }

// Table is the terms a server serves now, one Current per shard: a call
// about a pool takes the term of the pool's shard (Of). A standalone
// server, and a cluster of one shard, has one. Serve a shard's terms
// through the table (Serve), so that it knows whether it serves any
// (Idle).
type Table struct {
	shards []Current

	mu   sync.Mutex
	idle chan struct{} // closed while every shard's term has ended
}

// NewTable returns a table of n shards (at least 1), each serving none
// until Serve.
func NewTable(n int) *Table {
	idle := make(chan struct{})
	close(idle)
	return &Table{shards: make([]Current, max(n, 1)), idle: idle}
}

// Len is the number of shards.
func (tb *Table) Len() int { return len(tb.shards) }

// Shard is shard i's Current.
func (tb *Table) Shard(i int) *Current { return &tb.shards[i] }

// Of is the Current of the shard of the pool named pool.
func (tb *Table) Of(pool string) *Current { return &tb.shards[shard.Of(pool, len(tb.shards))] }

// ShardOf is the shard of the pool named pool.
func (tb *Table) ShardOf(pool string) int { return shard.Of(pool, len(tb.shards)) }

// Serve makes t the term of shard i served to the calls that start from
// now on.
func (tb *Table) Serve(i int, t *Term) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.shards[i].Serve(t)
	serving := false
	for j := range tb.shards {
		if c := tb.shards[j].Get(); c != nil && !ended(c) {
			serving = true
			break
		}
	}
	switch {
	case serving && isClosed(tb.idle):
		tb.idle = make(chan struct{})
	case !serving && !isClosed(tb.idle):
		close(tb.idle)
	}
}

// Idle is closed once no shard serves a term that has not ended (a
// server of a cluster that leads no shard), until one does again: a
// stream that serves many shards ends on it.
func (tb *Table) Idle() <-chan struct{} {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.idle
}

// Served is the terms the shards serve now, in shard order.
func (tb *Table) Served() []*Term {
	out := make([]*Term, len(tb.shards))
	for i := range tb.shards {
		out[i] = tb.shards[i].Get()
	}
	return out
}

func ended(t *Term) bool { return isClosed(t.done) }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Page is one page of what several terms list in name order: each term's
// engine lists (list: up to limit after after, and whether it has more)
// and the pages merge into the first limit by name (name), with more set
// when any term had more or some were cut. It is how a server lists the
// pools of the shards it serves.
func Page[T any](ts []*Term, limit int, name func(T) string, list func(eng *limiter.Engine) ([]T, bool)) ([]T, bool) {
	if len(ts) == 1 {
		return list(ts[0].Engine())
	}
	var all []T
	more := false
	for _, t := range ts {
		items, m := list(t.Engine())
		all = append(all, items...)
		more = more || m
	}
	sort.SliceStable(all, func(i, j int) bool { return name(all[i]) < name(all[j]) })
	if len(all) > limit {
		all, more = all[:limit], true
	}
	return all, more
}
