package limiter

import (
	"math"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Event marks: a pool reports, as PoolEvents through its outbox, when
// its queue or its utilisation crosses a mark:
//
//   - PoolOverload when the acquires waiting rise to or above the
//     overload mark; it fires once, and re-arms when the queue falls to
//     half the mark or below;
//   - PoolDrained when the pool becomes idle (nothing held and nothing
//     waiting) after a spell in which acquires had to wait: once per such
//     spell. A spell with holders but no waiter does not count: an
//     uncontended pool goes idle after nearly every release, and an event
//     for each would cost every release an allocation and the server a
//     log line, and push the events that matter out of its ring;
//   - PoolNearFull when utilisation (held / effective concurrency limit)
//     rises to or above the near-full mark; it re-arms when utilisation
//     falls below the mark minus NearFullHysteresis or minus one permit,
//     whichever is more (a small limit would otherwise re-arm at each
//     release and fire again at each grant);
//   - PoolLowUtilisation when the highest utilisation over a whole
//     LowUtilisationPeriod stayed below the low-utilisation mark while the
//     pool had capacity (it was not suspended or recovering at the end of
//     the period, and nothing waited then). It fires once per low spell
//     (so at most once per period), and re-arms after a period in which
//     utilisation reached the mark, or when the pool's configuration is
//     updated (an operator who lowered the limit hears again if it is
//     still too high). An idle pool so reports once, not every period,
//     and once reported its timer stops until its next grant.
//
// Every mark so has a hysteresis of at least one permit (overload: one
// waiter, as half the mark is at least one below it). On top of that, two
// events of one kind from one pool are at least the engine's
// MarkEventInterval apart: a crossing within it moves the mark's state as
// usual but is not reported; it is counted in
// PoolStatus.SuppressedMarkEvents and in the next reported event of its
// kind (PoolEvent.Suppressed).
//
// Overload, drained and near-full are evaluated where held or waiting
// change, with O(1) work and no clock read unless an event fires. Low
// utilisation is checked by a timer of the engine's clock at the end of
// each period. Near-full and low utilisation need a concurrency limit.

// Mark defaults and bounds.
const (
	// MarkOff, as a mark's value, turns its event off.
	MarkOff = -1
	// DefaultNearFullMark is the near-full mark of a pool that sets none.
	DefaultNearFullMark = 0.9
	// NearFullHysteresis: a fired near-full mark re-arms once utilisation
	// falls below the mark minus this.
	NearFullHysteresis = 0.1
	// DefaultLowUtilisationMark is the low-utilisation mark of a pool
	// that sets none.
	DefaultLowUtilisationMark = 0.1
	// DefaultLowUtilisationPeriod is the period of a pool that sets none;
	// MinLowUtilisationPeriod and MaxLowUtilisationPeriod bound it.
	DefaultLowUtilisationPeriod = 10 * time.Minute
	MinLowUtilisationPeriod     = time.Second
	MaxLowUtilisationPeriod     = 24 * time.Hour
	// DefaultMarkEventInterval is the least time between two reported
	// events of one kind from one pool when Options.MarkEventInterval is 0.
	DefaultMarkEventInterval = 10 * time.Second
)

// markKinds is the number of mark event types, PoolOverload to
// PoolLowUtilisation; markKind indexes them.
const markKinds = 4

func markKind(t PoolEventType) int { return int(t - PoolOverload) }

// MarkEventCounts counts mark events by type.
type MarkEventCounts [markKinds]int64

// Of returns the count of mark event type t (0 for another type).
func (c MarkEventCounts) Of(t PoolEventType) int64 {
	if t < PoolOverload || t > PoolLowUtilisation {
		return 0
	}
	return c[markKind(t)]
}

// Marks are a pool's event marks in effect, defaults resolved; a mark of 0
// is off.
type Marks struct {
	// Overload is the waiting count of PoolOverload.
	Overload int64
	// NearFull and LowUtilisation are fractions of the effective
	// concurrency limit.
	NearFull, LowUtilisation float64
	// LowUtilisationPeriod is the low-utilisation mark's period.
	LowUtilisationPeriod time.Duration
}

// EffectiveMarks returns c's marks with defaults resolved and MarkOff as
// 0: the overload mark defaults to half of MaxWaiters (at least 1; call it
// on the result of WithDefaults); near-full and low utilisation are off
// without a concurrency limit.
func (c PoolConfig) EffectiveMarks() Marks {
	m := Marks{Overload: c.OverloadMark, NearFull: c.NearFullMark, LowUtilisation: c.LowUtilisationMark, LowUtilisationPeriod: c.LowUtilisationPeriod}
	switch m.Overload {
	case 0:
		m.Overload = max(1, c.MaxWaiters/2)
	case MarkOff:
		m.Overload = 0
	}
	switch m.NearFull {
	case 0:
		m.NearFull = DefaultNearFullMark
	case MarkOff:
		m.NearFull = 0
	}
	switch m.LowUtilisation {
	case 0:
		m.LowUtilisation = DefaultLowUtilisationMark
	case MarkOff:
		m.LowUtilisation = 0
	}
	if m.LowUtilisationPeriod == 0 {
		m.LowUtilisationPeriod = DefaultLowUtilisationPeriod
	}
	if c.ConcurrencyLimit == 0 && c.ResourceKind == ResourceFree { // no capacity to be a fraction of
		m.NearFull, m.LowUtilisation = 0, 0
	}
	return m
}

// validateMarks reports a mark out of range, naming its field.
func (c PoolConfig) validateMarks() error {
	fraction := func(v float64) bool { return v == 0 || v == MarkOff || (v > 0 && v <= 1) }
	switch {
	case c.OverloadMark < MarkOff || c.OverloadMark > MaxWaitersLimit:
		return errorf(apierr.ErrInvalidArgument, "pool %q: overload_mark %d is out of range: give 1 to %d acquires waiting, 0 for half of max_waiters, or -1 for off", c.Name, c.OverloadMark, MaxWaitersLimit)
	case math.IsNaN(c.NearFullMark) || !fraction(c.NearFullMark):
		return errorf(apierr.ErrInvalidArgument, "pool %q: near_full_mark %v is out of range: give a fraction of the concurrency limit above 0 and at most 1, 0 for %v, or -1 for off", c.Name, c.NearFullMark, DefaultNearFullMark)
	case math.IsNaN(c.LowUtilisationMark) || !fraction(c.LowUtilisationMark):
		return errorf(apierr.ErrInvalidArgument, "pool %q: low_utilisation_mark %v is out of range: give a fraction of the concurrency limit above 0 and at most 1, 0 for %v, or -1 for off", c.Name, c.LowUtilisationMark, DefaultLowUtilisationMark)
	case c.LowUtilisationPeriod != 0 && (c.LowUtilisationPeriod < MinLowUtilisationPeriod || c.LowUtilisationPeriod > MaxLowUtilisationPeriod):
		return errorf(apierr.ErrInvalidArgument, "pool %q: low_utilisation_period %v is out of range [%v, %v] (0 means %v)", c.Name, c.LowUtilisationPeriod, MinLowUtilisationPeriod, MaxLowUtilisationPeriod, DefaultLowUtilisationPeriod)
	}
	return nil
}

// markState is a pool's marks and where it stands against them. Guarded
// by the pool's mutex.
type markState struct {
	Marks
	peakHeld int64 // most weight held since the low-utilisation period began
	lowTimer Timer // ends each low-utilisation period; nil when off, or idle (lowIdle)

	overloaded bool // PoolOverload fired and has not re-armed
	nearFull   bool // PoolNearFull fired and has not re-armed
	low        bool // PoolLowUtilisation fired and has not re-armed
	queued     bool // acquires waited since the pool was last idle
	lowArmed   bool // lowTimer is running, or idle
	// lowIdle: lowTimer is stopped because the pool was idle (nothing
	// held) at the end of a period it was already reported low in: no
	// period can change anything until a grant, which starts the next.
	lowIdle   bool
	listening bool // someone hears the events: else none is made

	reports *markReports    // nil until the first event is made
	total   MarkEventCounts // crossings not reported, ever

	// The pool's name and configured concurrency limit (configure), for
	// the events.
	pool string
	conf int64

	clock    Clock
	timers   timerHost     // told when a low-utilisation period ends (endPeriod)
	interval time.Duration // the engine's MarkEventInterval
}

// markReports are the times of the mark events made, by kind, and the
// crossings not reported since then.
type markReports struct {
	reported   [markKinds]time.Time // zero: never
	suppressed MarkEventCounts
}

// load is where a pool stands against its capacity, as the marks see it.
type load struct {
	held, waiting int64
	limit         int64 // the effective concurrency limit; 0: none
	instances     int64 // of an active or passive pool; -1 in a free pool
}

// capacity returns what utilisation is a fraction of: the effective
// concurrency limit, or in an active or passive pool its instances
// (within that limit, if it has one); 0 without either.
func (l load) capacity() int64 {
	capacity := l.limit
	if l.instances >= 0 && (capacity == 0 || l.instances < capacity) {
		capacity = l.instances
	}
	return max(capacity, 0)
}

// utilisation returns what utilisation would be with held permits: held
// / capacity, 0 without one. The marks' hysteresis of one permit compares
// held ± 1.
func (l load) utilisation(held int64) float64 {
	if c := l.capacity(); c > 0 {
		return float64(held) / float64(c)
	}
	return 0
}

// init sets up the marks of a new pool: timers is told when a
// low-utilisation period ends; events are made only when listening, at
// most one of a kind per interval.
func (m *markState) init(clock Clock, timers timerHost, listening bool, interval time.Duration) {
	m.clock, m.timers, m.listening, m.interval = clock, timers, listening, interval
}

// configure takes the marks of cfg, and starts, restarts or stops the
// low-utilisation period when its mark or period changed; held is the
// weight held now. The pool calls it when it is created and when its
// configuration changes.
func (m *markState) configure(cfg PoolConfig, held int64) {
	old := m.Marks
	m.Marks = cfg.EffectiveMarks()
	m.pool, m.conf = cfg.Name, cfg.ConcurrencyLimit
	m.low = false // an update re-arms low utilisation
	if m.Overload == 0 {
		m.overloaded = false
	}
	if m.NearFull == 0 {
		m.nearFull = false
	}
	low := m.LowUtilisation > 0
	if m.lowArmed && !m.lowIdle && low && old.LowUtilisationPeriod == m.LowUtilisationPeriod {
		return // the period goes on; a new mark applies at its end
	}
	m.stop()
	if !low {
		return
	}
	m.peakHeld = held
	m.lowArmed = true
	m.startPeriod()
}

// startPeriod (re)starts the low-utilisation timer for a period.
func (m *markState) startPeriod() {
	if m.lowTimer == nil {
		m.lowTimer = m.clock.AfterFunc(m.LowUtilisationPeriod, m.timers.marksFired)
	} else {
		m.lowTimer.Reset(m.LowUtilisationPeriod)
	}
}

// stop stops the low-utilisation timer.
func (m *markState) stop() {
	if m.lowTimer != nil {
		m.lowTimer.Stop()
	}
	m.lowArmed, m.lowIdle = false, false
}

// status fills in the mark events not reported. (Utilisation is the
// pool's: it knows the load.)
func (m *markState) status(s *PoolStatus, _ time.Time) {
	s.SuppressedMarkEvents = m.total
}

// check checks the overload, drained and near-full marks against ld and
// puts an event in ob for each one crossed. The pool calls it after held,
// the waiters or the capacity (an adaptive change, instances added or
// removed) change.
func (m *markState) check(ld load, ob *outbox) {
	if m.lowIdle && ld.held > 0 { // the first grant after an idle period starts the next
		m.lowIdle = false
		m.peakHeld = ld.held
		m.startPeriod()
	}
	if m.Overload > 0 {
		switch {
		case !m.overloaded && ld.waiting >= m.Overload:
			m.overloaded = true
			m.event(PoolOverload, float64(m.Overload), ld.utilisation(ld.held), ld, ob)
		case m.overloaded && ld.waiting*2 <= m.Overload:
			m.overloaded = false
		}
	}
	if ld.waiting > 0 {
		m.queued = true
	} else if m.queued && ld.held == 0 {
		m.queued = false
		m.event(PoolDrained, 0, 0, ld, ob)
	}
	m.peakHeld = max(m.peakHeld, ld.held)
	if m.NearFull > 0 && (ld.limit > 0 || ld.instances >= 0) {
		switch u := ld.utilisation(ld.held); { // against the instances too, in a resource pool
		case !m.nearFull && u >= m.NearFull:
			m.nearFull = true
			m.event(PoolNearFull, m.NearFull, u, ld, ob)
		case m.nearFull && u < m.NearFull-NearFullHysteresis && ld.utilisation(ld.held+1) < m.NearFull:
			m.nearFull = false
		}
	}
}

// endPeriod ends a low-utilisation period: it reports PoolLowUtilisation
// if the highest utilisation of the period stayed below the mark, the
// pool had capacity (it is not blocked: suspended or recovering, and
// nothing waits) and the mark is armed, re-arms it if the utilisation
// reached the mark, and starts the next period.
func (m *markState) endPeriod(ld load, blocked bool, ob *outbox) {
	if !m.lowArmed {
		return
	}
	if m.LowUtilisation > 0 && ld.limit > 0 {
		switch u := float64(m.peakHeld) / float64(ld.limit); {
		case float64(m.peakHeld-1)/float64(ld.limit) >= m.LowUtilisation: // a permit above the mark
			m.low = false
		case u >= m.LowUtilisation: // within the hysteresis: neither
		case !m.low && !blocked && ld.waiting == 0:
			m.low = true
			m.event(PoolLowUtilisation, m.LowUtilisation, u, ld, ob)
		}
	}
	m.peakHeld = ld.held
	if m.low && ld.held == 0 {
		m.lowIdle = true // no timer ticks for an idle pool, nor is kept
		if m.lowTimer != nil {
			m.lowTimer.Stop()
		}
		m.lowTimer = nil
		return
	}
	m.lowTimer.Reset(m.LowUtilisationPeriod)
}

// event puts a mark event in ob, unless nobody listens or one of its kind
// was reported within the engine's mark event interval (then it counts it
// as suppressed).
func (m *markState) event(t PoolEventType, mark, utilisation float64, ld load, ob *outbox) {
	if !m.listening {
		return
	}
	if m.reports == nil {
		m.reports = &markReports{}
	}
	r, now, k := m.reports, m.clock.Now(), markKind(t)
	if last := r.reported[k]; !last.IsZero() && now.Sub(last) < m.interval {
		r.suppressed[k]++
		m.total[k]++
		return
	}
	r.reported[k] = now
	ev := PoolEvent{
		Pool:                       m.pool,
		Type:                       t,
		Time:                       now,
		Suppressed:                 r.suppressed[k],
		ConcurrencyLimit:           ld.limit,
		ConfiguredConcurrencyLimit: m.conf,
		Held:                       ld.held,
		Waiting:                    ld.waiting,
		Utilisation:                utilisation,
		Mark:                       mark,
	}
	if m.conf == 0 {
		ev.ConcurrencyLimit = 0
	}
	if t == PoolLowUtilisation {
		ev.Period = m.LowUtilisationPeriod
	}
	r.suppressed[k] = 0
	ob.events = append(ob.events, ev)
}

// loadLocked returns where the pool stands, for its marks.
func (p *pool) loadLocked() load {
	ld := load{held: p.held, waiting: int64(p.queue.len()), limit: p.ad.limit, instances: -1}
	if p.res != nil {
		ld.instances = int64(len(p.res.byID))
	}
	return ld
}

// marksLocked checks the marks against the pool's load now
// (markState.check). Call it after held, the waiters or the capacity
// change.
func (p *pool) marksLocked() { p.mk.check(p.loadLocked(), &p.out) }
