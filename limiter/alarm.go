package limiter

import "time"

// alarm is a timer armed for the earliest of the instants asked of it: a
// pool's expiry timer (the earliest expiry of its leases) and its rate
// timer (when the bucket will hold the tokens of the head of its queue).
// It is guarded by the pool's mutex.
type alarm struct {
	t  Timer // nil until first armed
	at int64 // when t fires, Unix ns; 0 when not armed
}

// armAlarm makes sure a fires no later than at, by clk, whose time is
// now: it runs f(x) then, the same f and x at every call. The closure is
// made only with the alarm's timer, so that arming allocates nothing.
func armAlarm[T any](a *alarm, clk Clock, at, now time.Time, f func(T), x T) {
	if a.at != 0 && at.UnixNano() >= a.at {
		return
	}
	a.at = at.UnixNano()
	if a.t == nil {
		a.t = clk.AfterFunc(at.Sub(now), func() { f(x) })
	} else {
		a.t.Reset(at.Sub(now))
	}
}

// rang records that the alarm went off: it is no longer armed.
func (a *alarm) rang() { a.at = 0 }

// stop disarms the alarm.
func (a *alarm) stop() {
	if a.t != nil {
		a.t.Stop()
	}
	a.at = 0
}
