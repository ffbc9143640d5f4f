package limiter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// markEvents returns the recorded events of type typ, and clears them all.
func (ee *eventEngine) markEvents(typ PoolEventType) []PoolEvent {
	var out []PoolEvent
	for _, ev := range ee.takeEvents() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestMarkNearFullAndDrained(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, NearFullMark: 0.5, LowUtilisationMark: MarkOff})
	var held []Lease
	acquire := func(n int) {
		for i := 0; i < n; i++ {
			held = append(held, ee.mustAcquire(t, AcquireRequest{Pool: "db"}))
		}
	}
	release := func(n int) {
		for i := 0; i < n; i++ {
			l := held[len(held)-1]
			held = held[:len(held)-1]
			if _, err := ee.Release("db", l.FencingToken); err != nil {
				t.Fatal(err)
			}
		}
	}
	acquire(4)
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("events below every mark: %+v", evs)
	}
	acquire(1) // 5 of 10: the mark
	evs := ee.takeEvents()
	if len(evs) != 1 || evs[0].Type != PoolNearFull || evs[0].Held != 5 || evs[0].Utilisation != 0.5 || evs[0].Mark != 0.5 ||
		evs[0].ConcurrencyLimit != 10 || !evs[0].Time.Equal(epoch) || evs[0].Pool != "db" {
		t.Fatalf("near-full events at 5 of 10: %+v", evs)
	}
	acquire(2) // 7: still above, no repeat
	release(3) // 4: utilisation 0.4 is not below 0.5-0.1: not re-armed
	acquire(1) // 5 again
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("near-full repeated without re-arming: %+v", evs)
	}
	release(2) // 3: below 0.5 minus 0.1 (and minus a permit): re-armed
	ee.clk.Advance(DefaultMarkEventInterval)
	acquire(2) // 5: fires again
	if evs := ee.markEvents(PoolNearFull); len(evs) != 1 || evs[0].Held != 5 {
		t.Fatalf("near-full after re-arming: %+v", evs)
	}

	// Nothing waited: going idle is no event.
	release(len(held))
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("events after an uncontended spell ended: %+v", evs)
	}
}

func TestMarkDrained(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, NearFullMark: MarkOff, LowUtilisationMark: MarkOff})
	l := ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	pa := ee.startAcquire(t, AcquireRequest{Pool: "db"})
	if _, err := ee.Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	l2, err := pa.result(t)
	if err != nil {
		t.Fatal(err)
	}
	if evs := ee.markEvents(PoolDrained); len(evs) != 0 {
		t.Fatalf("drained while the waiter's lease is held: %+v", evs)
	}
	ee.clk.Advance(time.Second)
	if _, err := ee.Release("db", l2.FencingToken); err != nil {
		t.Fatal(err)
	}
	evs := ee.takeEvents()
	if len(evs) != 1 || evs[0].Type != PoolDrained || evs[0].Held != 0 || evs[0].Waiting != 0 || !evs[0].Time.Equal(epoch.Add(time.Second)) {
		t.Fatalf("drained events after the queue and the pool emptied: %+v", evs)
	}
	// Idle stays idle, and an uncontended use after it is no new spell.
	ee.clk.Advance(time.Hour)
	l = ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	if _, err := ee.Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("events while idle or uncontended: %+v", evs)
	}
	// A waiter that gives up also makes a spell with waiters.
	l = ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	pa = ee.startAcquire(t, AcquireRequest{Pool: "db"})
	pa.cancel()
	if _, err := pa.result(t); err == nil {
		t.Fatal("a cancelled acquire was granted")
	}
	if _, err := ee.Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	if evs := ee.markEvents(PoolDrained); len(evs) != 1 {
		t.Fatalf("drained after a cancelled waiter's spell: %+v", evs)
	}
}

func TestMarkOverload(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, OverloadMark: 4, LowUtilisationMark: MarkOff, NearFullMark: MarkOff})
	l := ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	var waiters []*pending
	wait := func(n int) {
		for i := 0; i < n; i++ {
			waiters = append(waiters, ee.startAcquire(t, AcquireRequest{Pool: "db"}))
		}
	}
	cancel := func(n int) {
		for i := 0; i < n; i++ {
			pa := waiters[len(waiters)-1]
			waiters = waiters[:len(waiters)-1]
			pa.cancel()
			if _, err := pa.result(t); err == nil {
				t.Fatal("a cancelled waiter was granted")
			}
		}
	}
	wait(3)
	if evs := ee.markEvents(PoolOverload); len(evs) != 0 {
		t.Fatalf("overload below the mark: %+v", evs)
	}
	wait(1) // 4 waiting: the mark
	var evs []PoolEvent
	testwait.For(t, "an overload mark event", func() bool { evs = append(evs, ee.markEvents(PoolOverload)...); return len(evs) > 0 })
	if len(evs) != 1 || evs[0].Waiting != 4 || evs[0].Mark != 4 || evs[0].Held != 1 {
		t.Fatalf("overload events: %+v", evs)
	}
	wait(1)   // 5: no repeat
	cancel(2) // 3: above half the mark, not re-armed
	wait(1)   // 4
	if evs := ee.markEvents(PoolOverload); len(evs) != 0 {
		t.Fatalf("overload repeated without re-arming: %+v", evs)
	}
	cancel(2) // 2: half the mark, re-armed
	ee.clk.Advance(DefaultMarkEventInterval)
	wait(2) // 4: fires again
	evs = nil
	testwait.For(t, "an overload mark event", func() bool { evs = append(evs, ee.markEvents(PoolOverload)...); return len(evs) > 0 })
	if len(evs) != 1 || evs[0].Waiting != 4 {
		t.Fatalf("overload after re-arming: %+v", evs)
	}
	cancel(len(waiters))
	if _, err := ee.Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	if evs := ee.markEvents(PoolDrained); len(evs) != 1 {
		t.Fatalf("drained after the queue and the pool emptied: %+v", evs)
	}
}

func TestMarkLowUtilisation(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, LowUtilisationMark: 0.2, LowUtilisationPeriod: time.Minute, NearFullMark: MarkOff, MaxLeaseTTL: 24 * time.Hour, DefaultLeaseTTL: 24 * time.Hour})
	l1 := ee.mustAcquire(t, AcquireRequest{Pool: "db"}) // 0.1
	ee.clk.Advance(59 * time.Second)
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("events before the period ended: %+v", evs)
	}
	ee.clk.Advance(time.Second)
	evs := ee.takeEvents()
	if len(evs) != 1 || evs[0].Type != PoolLowUtilisation || evs[0].Utilisation != 0.1 || evs[0].Mark != 0.2 ||
		evs[0].Period != time.Minute || !evs[0].Time.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("low-utilisation events after a period at 0.1: %+v", evs)
	}
	// At most once per period.
	ee.clk.Advance(59 * time.Second)
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("low utilisation repeated within a period: %+v", evs)
	}
	// A moment at the mark within the next period: no event for it, but
	// within the hysteresis of one permit it does not re-arm either.
	l2 := ee.mustAcquire(t, AcquireRequest{Pool: "db"}) // 0.2
	if _, err := ee.Release("db", l2.FencingToken); err != nil {
		t.Fatal(err)
	}
	ee.clk.Advance(time.Second)
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("low utilisation in a period that reached the mark: %+v", evs)
	}
	ee.clk.Advance(time.Minute)
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("low utilisation re-armed by reaching the mark, within its hysteresis: %+v", evs)
	}
	// A moment at the mark plus one permit re-arms it.
	ee.clk.Advance(59 * time.Second)
	l2 = ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	l3 := ee.mustAcquire(t, AcquireRequest{Pool: "db"}) // 0.3
	for _, l := range []Lease{l2, l3} {
		if _, err := ee.Release("db", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	ee.clk.Advance(time.Second)
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("low utilisation in a period that reached the mark: %+v", evs)
	}
	// That re-armed it: the next whole period below it fires again.
	ee.clk.Advance(time.Minute)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 1 || evs[0].Utilisation != 0.1 {
		t.Fatalf("low utilisation after another low period: %+v", evs)
	}
	// Once per low spell: a further low period is no new event.
	ee.clk.Advance(time.Minute)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 0 {
		t.Fatalf("low utilisation repeated within one low spell: %+v", evs)
	}
	// An update re-arms it; a suspended pool has no capacity: no event.
	if _, err := ee.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 20 }); err != nil {
		t.Fatal(err)
	}
	if _, err := ee.SuspendPool("db", false); err != nil {
		t.Fatal(err)
	}
	ee.clk.Advance(time.Minute)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 0 {
		t.Fatalf("low utilisation while suspended: %+v", evs)
	}
	if _, err := ee.ResumePool("db"); err != nil {
		t.Fatal(err)
	}
	ee.clk.Advance(time.Minute)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 1 || evs[0].Utilisation != 0.05 || evs[0].ConcurrencyLimit != 20 {
		t.Fatalf("low utilisation after the update and the resume: %+v", evs)
	}
	// Off: no timer, no event.
	if _, err := ee.UpdatePool("db", func(c *PoolConfig) { c.LowUtilisationMark = MarkOff }); err != nil {
		t.Fatal(err)
	}
	ee.clk.Advance(time.Hour)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 0 {
		t.Fatalf("low utilisation with the mark off: %+v", evs)
	}
	_ = l1
}

func TestMarksValidation(t *testing.T) {
	te := newTestEngine(t)
	for _, tc := range []struct {
		cfg   PoolConfig
		field string
	}{
		{PoolConfig{Name: "a", ConcurrencyLimit: 1, OverloadMark: -2}, "overload_mark"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 1, NearFullMark: 1.5}, "near_full_mark"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 1, NearFullMark: -0.5}, "near_full_mark"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 1, LowUtilisationMark: 2}, "low_utilisation_mark"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 1, LowUtilisationPeriod: time.Millisecond}, "low_utilisation_period"},
	} {
		_, err := te.CreatePool(tc.cfg)
		wantReason(t, err, apierr.ErrInvalidArgument)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("CreatePool(%+v): %v; want a message naming %s", tc.cfg, err, tc.field)
		}
	}
	m := (PoolConfig{ConcurrencyLimit: 4, MaxWaiters: 100}).EffectiveMarks()
	if m != (Marks{Overload: 50, NearFull: DefaultNearFullMark, LowUtilisation: DefaultLowUtilisationMark, LowUtilisationPeriod: DefaultLowUtilisationPeriod}) {
		t.Fatalf("default marks: %+v", m)
	}
	m = (PoolConfig{Rate: 4, MaxWaiters: 100, OverloadMark: MarkOff}).EffectiveMarks()
	if m.Overload != 0 || m.NearFull != 0 || m.LowUtilisation != 0 {
		t.Fatalf("marks of a rate-only pool with overload off: %+v", m)
	}
}

// BenchmarkGrantBookkeeping measures what event marks and wait times add
// to a grant and its release: a wait record and two mark checks.
func BenchmarkGrantBookkeeping(b *testing.B) {
	te := newTestEngine(b)
	te.mustCreate(b, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	p := te.pools.get("db")
	now := te.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.waits.record(now, 0)
		p.held++
		p.marksLocked()
		p.held--
		p.marksLocked()
	}
}

// TestMarkEventsDoNotFlood: a small limit held near full by rapid
// release-then-grant cycles for a simulated minute reports a handful of
// events, not one per cycle: the near-full mark re-arms only a permit
// below it, and crossings within the mark event interval are counted,
// not reported.
func TestMarkEventsDoNotFlood(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 4, OverloadMark: 1, LowUtilisationMark: MarkOff, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour})
	var held []Lease
	cycle := func(n int) { // release n, then take n again
		for i := 0; i < n; i++ {
			if _, err := ee.Release("db", held[len(held)-1].FencingToken); err != nil {
				t.Fatal(err)
			}
			held = held[:len(held)-1]
		}
		for i := 0; i < n; i++ {
			held = append(held, ee.mustAcquire(t, AcquireRequest{Pool: "db"}))
		}
	}
	for range 4 {
		held = append(held, ee.mustAcquire(t, AcquireRequest{Pool: "db"}))
	}
	// Held at 3 to 4 every 10ms for a minute: the mark (3.6 of 4) is
	// crossed once; 3 of 4 is within a permit of it.
	for range 6000 {
		ee.clk.Advance(10 * time.Millisecond)
		cycle(1)
	}
	if evs := ee.markEvents(PoolNearFull); len(evs) != 1 {
		t.Fatalf("%d near-full events for a minute at 3 to 4 of 4; want 1", len(evs))
	}
	if n := ee.status(t, "db").SuppressedMarkEvents.Of(PoolNearFull); n != 0 {
		t.Fatalf("%d near-full events suppressed with none crossed again", n)
	}

	// Held at 2 to 4: re-armed and crossed 6000 times in a minute, one
	// report per DefaultMarkEventInterval, each counting the crossings
	// suppressed since the previous one.
	for range 6000 {
		ee.clk.Advance(10 * time.Millisecond)
		cycle(2)
	}
	evs := ee.markEvents(PoolNearFull)
	suppressed := ee.status(t, "db").SuppressedMarkEvents.Of(PoolNearFull)
	if len(evs) < 5 || len(evs) > 7 || int64(len(evs))+suppressed != 6000 {
		t.Fatalf("%d near-full events and %d suppressed for 6000 crossings in a minute; want 6 or so, and all counted", len(evs), suppressed)
	}
	var reported int64
	for i, ev := range evs {
		if i > 0 && ev.Time.Sub(evs[i-1].Time) < DefaultMarkEventInterval {
			t.Fatalf("near-full events %v apart", ev.Time.Sub(evs[i-1].Time))
		}
		reported += ev.Suppressed
	}
	if reported == 0 || reported > suppressed {
		t.Fatalf("events carry %d suppressed crossings of %d", reported, suppressed)
	}

	// The overload mark (1 waiting) crossed by a waiter that comes and
	// goes every 100ms for 30s: at most one event per interval.
	for range 300 {
		ee.clk.Advance(100 * time.Millisecond)
		pa := ee.startAcquire(t, AcquireRequest{Pool: "db"})
		pa.cancel()
		if _, err := pa.result(t); err == nil {
			t.Fatal("a cancelled waiter was granted")
		}
	}
	if evs := ee.markEvents(PoolOverload); len(evs) < 3 || len(evs) > 4 {
		t.Fatalf("%d overload events for 300 crossings in 30s; want 3 or 4", len(evs))
	}
	if n := ee.status(t, "db").SuppressedMarkEvents.Of(PoolOverload); n < 296 {
		t.Fatalf("%d overload events suppressed; want the rest of 300", n)
	}
}

// TestIdlePoolsRunNoTimers: a pool with nothing held, once reported low,
// runs no timer (10,000 idle pools would tick every period otherwise); its
// next grant starts the next period, which reports again once the pool
// was above the mark and fell back.
func TestIdlePoolsRunNoTimers(t *testing.T) {
	ee := newEventEngine(t)
	for i := range 100 {
		ee.mustCreate(t, PoolConfig{Name: fmt.Sprintf("p%d", i), ConcurrencyLimit: 10, LowUtilisationPeriod: time.Minute})
	}
	ee.clk.Advance(time.Minute) // each reports low once
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 100 {
		t.Fatalf("%d low-utilisation events from 100 idle pools, want 100", len(evs))
	}
	if n := ee.clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending for 100 idle pools, want 0", n)
	}
	ee.clk.Advance(time.Hour)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 0 {
		t.Fatalf("idle pools reported again: %+v", evs)
	}
	// Busy above the mark in the period the next grant starts, then idle
	// for a whole period: low again.
	var ls []Lease
	for range 3 {
		ls = append(ls, ee.mustAcquire(t, AcquireRequest{Pool: "p7", TTL: 10 * time.Second}))
	}
	for _, l := range ls {
		if _, err := ee.Release("p7", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	ee.clk.Advance(time.Minute)
	ee.clk.Advance(time.Minute)
	if evs := ee.markEvents(PoolLowUtilisation); len(evs) != 1 || evs[0].Pool != "p7" {
		t.Fatalf("after a busy period and an idle one: %+v", evs)
	}
}

// newMarkPart returns the marks of a pool with limit 10, on their own, on
// a fake clock, reporting at most one event of a kind per minute.
func newMarkPart(cfg PoolConfig) (*markState, *fakeclock.Clock) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	m := new(markState)
	m.init(clk, new(fakeTimers), true, time.Minute)
	m.configure(cfg.WithDefaults(), 0)
	return m, clk
}

// TestMarkPartCrossings drives the marks alone: overload fires once and
// re-arms at half the mark; near-full re-arms below the hysteresis;
// drained follows a spell with waiters; a crossing within the interval is
// suppressed and counted.
func TestMarkPartCrossings(t *testing.T) {
	m, clk := newMarkPart(PoolConfig{Name: "p", ConcurrencyLimit: 10, OverloadMark: 4, LowUtilisationMark: MarkOff})
	var ob outbox
	types := func() (out []PoolEventType) {
		for _, ev := range ob.events {
			out = append(out, ev.Type)
		}
		ob = outbox{}
		return out
	}
	m.check(load{held: 9, waiting: 4, limit: 10, instances: -1}, &ob)
	if got := types(); !slices.Equal(got, []PoolEventType{PoolOverload, PoolNearFull}) {
		t.Fatalf("events %v", got)
	}
	m.check(load{held: 9, waiting: 3, limit: 10, instances: -1}, &ob)
	m.check(load{held: 8, waiting: 3, limit: 10, instances: -1}, &ob) // within the hysteresis of both
	if got := types(); len(got) != 0 || !m.overloaded || !m.nearFull {
		t.Fatalf("events %v, overloaded %v, near full %v", got, m.overloaded, m.nearFull)
	}
	m.check(load{held: 7, waiting: 0, limit: 10, instances: -1}, &ob)
	m.check(load{held: 0, waiting: 0, limit: 10, instances: -1}, &ob)
	if got := types(); !slices.Equal(got, []PoolEventType{PoolDrained}) || m.overloaded || m.nearFull {
		t.Fatalf("events %v", got)
	}
	m.check(load{held: 10, waiting: 4, limit: 10, instances: -1}, &ob) // again within the interval
	var s PoolStatus
	m.status(&s, clk.Now())
	if got := types(); len(got) != 0 || s.SuppressedMarkEvents.Of(PoolOverload) != 1 || s.SuppressedMarkEvents.Of(PoolNearFull) != 1 {
		t.Fatalf("events %v, suppressed %v", got, s.SuppressedMarkEvents)
	}
	clk.Advance(time.Minute)
	m.check(load{held: 0, waiting: 0, limit: 10, instances: -1}, &ob)
	if evs := ob.events; len(evs) != 1 || evs[0].Type != PoolDrained || evs[0].Suppressed != 0 || evs[0].Pool != "p" {
		t.Fatalf("events %+v", evs)
	}
}

// TestMarkPartLowUtilisation: a period whose peak stayed under the mark
// reports once, unless the pool was blocked; an idle pool then stops its
// timer until the next grant.
func TestMarkPartLowUtilisation(t *testing.T) {
	m, clk := newMarkPart(PoolConfig{Name: "p", ConcurrencyLimit: 10, LowUtilisationPeriod: time.Minute})
	var ob outbox
	if clk.Pending() != 1 {
		t.Fatalf("%d timers", clk.Pending())
	}
	idle := load{limit: 10, instances: -1}
	m.endPeriod(idle, true, &ob) // suspended or recovering: not reported
	if len(ob.events) != 0 || m.low {
		t.Fatalf("a blocked pool reported %+v", ob.events)
	}
	m.endPeriod(idle, false, &ob)
	if len(ob.events) != 1 || ob.events[0].Type != PoolLowUtilisation || ob.events[0].Period != time.Minute || !m.lowIdle {
		t.Fatalf("events %+v, idle %v", ob.events, m.lowIdle)
	}
	m.check(load{held: 1, limit: 10, instances: -1}, &ob) // the next grant starts a period
	if m.lowIdle || m.peakHeld != 1 {
		t.Fatalf("idle %v, peak %d", m.lowIdle, m.peakHeld)
	}
	m.stop()
	if clk.Pending() != 0 {
		t.Fatal("the period's timer outlived stop")
	}
}

// TestLoadCapacity: utilisation is a fraction of the effective limit, or
// of the instances where there are fewer.
func TestLoadCapacity(t *testing.T) {
	for _, c := range []struct {
		ld   load
		want int64
	}{
		{load{limit: 10, instances: -1}, 10},
		{load{limit: 10, instances: 4}, 4},
		{load{limit: 0, instances: 4}, 4},
		{load{limit: 3, instances: 4}, 3},
		{load{limit: 0, instances: -1}, 0},
	} {
		if got := c.ld.capacity(); got != c.want {
			t.Errorf("%+v: capacity %d, want %d", c.ld, got, c.want)
		}
	}
	if u := (load{limit: 4, instances: -1}).utilisation(3); u != 0.75 {
		t.Errorf("utilisation %v", u)
	}
}
