package limits

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rates is a token bucket per client key, for Limits.ClientRate. A
// bucket that has been idle long enough to be full again behaves exactly
// like a new one, so such buckets are dropped: memory stays proportional to
// the clients seen in the last few seconds, whatever the number of
// distinct keys over time.
type Rates struct {
	limit rate.Limit
	burst int
	now   func() time.Time // the wall clock; SetClock replaces it
	// idle is how long a bucket takes to refill completely; buckets idle
	// that long are dropped.
	idle time.Duration

	mu        sync.Mutex
	buckets   map[string]*clientBucket
	lastSweep time.Time
}

type clientBucket struct {
	lim  *rate.Limiter
	last time.Time
}

// NewRates returns buckets of r requests per second and burst b, or
// nil when r is not positive (no limit).
func NewRates(r float64, b int) *Rates {
	if r <= 0 {
		return nil
	}
	b = max(b, 1)
	idle := time.Duration(float64(b) / r * float64(time.Second))
	return &Rates{
		limit:   rate.Limit(r),
		burst:   b,
		now:     time.Now,
		idle:    max(idle, time.Second),
		buckets: make(map[string]*clientBucket),
	}
}

// Allow takes one token from key's bucket and reports whether it had one.
// A nil *Rates allows everything.
func (c *Rates) Allow(key string) bool { return c.AllowN(key, 1) }

// AllowN takes n tokens from key's bucket, all or none, and reports
// whether it had them; n larger than the burst counts as the burst.
func (c *Rates) AllowN(key string, n int) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.lastSweep) >= c.idle {
		c.sweepLocked(now)
	}
	b := c.buckets[key]
	if b == nil {
		b = &clientBucket{lim: rate.NewLimiter(c.limit, c.burst)}
		b.lim.SetLimitAt(now, c.limit) // start full at now, by this clock
		c.buckets[key] = b
	}
	b.last = now
	return b.lim.AllowN(now, min(n, c.burst))
}

// sweepLocked drops the buckets idle for at least c.idle. It runs at most
// once per c.idle, so its cost is spread over the calls in between.
func (c *Rates) sweepLocked(now time.Time) {
	c.lastSweep = now
	for k, b := range c.buckets {
		if now.Sub(b.last) >= c.idle {
			delete(c.buckets, k)
		}
	}
}

// size returns the number of buckets kept.
func (c *Rates) size() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buckets)
}

// SetClock makes c read the time from now, for tests.
func (c *Rates) SetClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}
