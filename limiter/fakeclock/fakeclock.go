// Package fakeclock provides a manually advanced clock.Clock for tests.
//
// Time stands still until Advance or Set moves it; timers whose time has come
// then run, in time order, synchronously in the goroutine that advanced the
// clock. A test therefore knows that every effect of moving time (expired
// leases, refilled tokens, timed-out waiters) has happened when Advance
// returns.
package fakeclock

import (
	"sort"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter/clock"
)

// Clock is a fake clock.Clock. The zero value is not usable; call New.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[*timer]struct{}
}

// New returns a Clock that reads start until it is advanced.
func New(start time.Time) *Clock {
	return &Clock{now: start, timers: make(map[*timer]struct{})}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock reaches Now()+d. A d of zero
// or less runs f at the next Advance (even Advance(0)).
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, f: f}
	c.scheduleLocked(t, d)
	return t
}

// Advance moves the clock forward by d and runs, in order of their times,
// every timer that is due, each with the clock set to its due time. Timers
// scheduled by those calls run too if they fall due within d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	c.Set(end)
}

// Set moves the clock to t (which must not be before Now) and runs due
// timers as Advance does.
func (c *Clock) Set(end time.Time) {
	for {
		c.mu.Lock()
		next := c.nextDueLocked(end)
		if next == nil {
			if end.After(c.now) {
				c.now = end
			}
			c.mu.Unlock()
			return
		}
		delete(c.timers, next)
		if next.when.After(c.now) {
			c.now = next.when
		}
		f := next.f
		c.mu.Unlock()
		f()
	}
}

// Pending returns the number of timers that have not yet run or been stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextDeadline returns when the earliest pending timer falls due, and false
// if none is pending.
func (c *Clock) NextDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.sortedLocked()
	if len(ts) == 0 {
		return time.Time{}, false
	}
	return ts[0].when, true
}

func (c *Clock) nextDueLocked(end time.Time) *timer {
	ts := c.sortedLocked()
	if len(ts) == 0 || ts[0].when.After(end) {
		return nil
	}
	return ts[0]
}

func (c *Clock) sortedLocked() []*timer {
	ts := make([]*timer, 0, len(c.timers))
	for t := range c.timers {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool {
		if !ts[i].when.Equal(ts[j].when) {
			return ts[i].when.Before(ts[j].when)
		}
		return ts[i].seq < ts[j].seq
	})
	return ts
}

func (c *Clock) scheduleLocked(t *timer, d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.seq++
	t.seq = c.seq
	t.when = c.now.Add(d)
	c.timers[t] = struct{}{}
}

type timer struct {
	c    *Clock
	f    func()
	when time.Time
	seq  uint64
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, pending := t.c.timers[t]
	delete(t.c.timers, t)
	return pending
}

func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, pending := t.c.timers[t]
	t.c.scheduleLocked(t, d)
	return pending
}
