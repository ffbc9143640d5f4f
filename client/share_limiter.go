package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Limiter spends a share of a pool's rate locally, like a
// golang.org/x/time/rate.Limiter: Wait, WaitN, Allow, AllowN and Limit make
// no call to the server. The server grants the share (its fair part of the
// pool's rate among the processes that want it; see Client.NewLimiter) and a
// background goroutine refreshes it over the Client's Session stream, so
// the local bucket follows the grant as it grows and shrinks.
//
// When the server cannot be reached, the Limiter keeps spending its share
// until the share's expiry (minus a safety margin, by the local clock),
// then the pool's safe rate (its safe_rate; 0 means it stops) until it
// gets a share again: it keeps refreshing the same share, which the server
// gives back if it still holds it, and acquires a new one once the server
// says it does not. Before the first grant it grants nothing: Wait waits,
// Allow refuses. Close gives the share back.
//
// Its methods are safe for concurrent use.
type Limiter struct {
	c      *Client
	pool   string
	weight int64
	ttl    time.Duration
	bucket *rate.Limiter // the local bucket: 0/0 while nothing may be spent

	kick chan struct{} // refresh (or acquire) now
	stop context.CancelFunc
	done chan struct{} // closed when the keeper has stopped

	mu      sync.Mutex
	want    float64
	state   limiterState
	err     error         // why it refuses (stateRefused), or ErrLimiterClosed
	changed chan struct{} // closed, and replaced, when the bucket changes
	share   shareGrant    // the live share; id "" when none
}

// limiterState says what a Limiter spends.
type limiterState uint8

const (
	stateWaiting limiterState = iota // no grant yet: nothing
	stateShare                       // the granted share
	stateSafe                        // the safe rate: the share expired unreachable
	stateRefused                     // the server refused the share: nothing; Wait fails with err
	stateClosed                      // Close was called, or the Client closed
)

// shareGrant is a granted share as the Limiter knows it.
type shareGrant struct {
	id       string
	rate     float64
	burst    int
	safeRate float64
	ttl      time.Duration
	refresh  time.Duration // interval
	deadline time.Time     // local: send time of the last refresh + ttl - margin
	version  uint64        // RateShare.version of rate and burst
}

// ErrLimiterClosed is returned by a Limiter's Wait after Close (or after
// its Client was closed).
var ErrLimiterClosed = errors.New("tollgate: limiter closed")

// LimiterOption configures Client.NewLimiter.
type LimiterOption func(*Limiter)

// WithShareWeight sets the share's weight in the fair division (1 to 1000,
// default 1): a share of weight 3 gets three times the rate of a share of
// weight 1 when both want more than they can have.
func WithShareWeight(w int64) LimiterOption { return func(l *Limiter) { l.weight = w } }

// WithShareTTL sets the share's TTL (default: the pool's default_lease_ttl);
// it is refreshed every TTL/3. The server requires at least 100ms and at
// most the pool's max_lease_ttl.
func WithShareTTL(d time.Duration) LimiterOption { return func(l *Limiter) { l.ttl = d } }

// NewLimiter returns a Limiter that spends a share of pool's rate: want is
// the rate this process would use, in tokens per second. The server
// divides the pool's (effective) rate among the holders: a process that
// wants less than an equal part gets what it wants, and the rest goes to
// those that want more; the sum never exceeds the pool's rate. The share
// is acquired in the background; the Limiter grants nothing until it
// arrives.
//
// Errors: a want that is not above 0, ErrClosed. The server's refusals
// (apierr.ErrPoolNotFound, apierr.ErrNoRateLimit, ...) come from Wait.
func (c *Client) NewLimiter(pool string, want float64, opts ...LimiterOption) (*Limiter, error) {
	if !(want > 0) || math.IsInf(want, 0) {
		return nil, fmt.Errorf("tollgate: NewLimiter(%q, %v): want a rate above 0 tokens per second", pool, want)
	}
	l := &Limiter{c: c, pool: pool, want: want, weight: 1, bucket: rate.NewLimiter(0, 0),
		kick: make(chan struct{}, 1), done: make(chan struct{}), changed: make(chan struct{})}
	for _, o := range opts {
		o(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	if !c.goBackground(func(cctx context.Context) {
		stop := context.AfterFunc(cctx, cancel) // the Client's Close stops it too
		defer stop()
		l.keep(ctx)
	}) {
		cancel()
		return nil, ErrClosed
	}
	return l, nil
}

// Pool returns the name of the pool the Limiter spends a share of.
func (l *Limiter) Pool() string { return l.pool }

// Limit returns the rate the Limiter spends now, in tokens per second: the
// granted share, the safe rate, or 0.
func (l *Limiter) Limit() rate.Limit { return l.bucket.Limit() }

// Burst returns the size of the local bucket now.
func (l *Limiter) Burst() int { return l.bucket.Burst() }

// Allow reports whether one token may be spent now. It is AllowN(time.Now(), 1).
func (l *Limiter) Allow() bool { return l.bucket.Allow() }

// AllowN reports whether n tokens may be spent at t, and spends them if so.
func (l *Limiter) AllowN(t time.Time, n int) bool { return l.bucket.AllowN(t, n) }

// Wait waits for one token. It is WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN waits until n tokens may be spent and spends them, or returns an
// error: ctx.Err(); an error if n exceeds the burst while tokens come in
// (as x/time/rate does) or if the wait would outlast ctx's deadline; the
// server's refusal of the share (apierr.ErrPoolNotFound, apierr.ErrNoRateLimit, ...);
// ErrLimiterClosed. While the Limiter grants nothing (no share yet, a
// share of 0, a safe rate of 0), it waits for that to change.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	for {
		l.mu.Lock()
		st, err, changed := l.state, l.err, l.changed
		l.mu.Unlock()
		switch st {
		case stateClosed, stateRefused:
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if l.bucket.Limit() > 0 {
			if burst := l.bucket.Burst(); n > burst {
				return fmt.Errorf("tollgate: WaitN(n=%d) exceeds the limiter's burst %d for pool %q", n, burst, l.pool)
			}
			done, err := l.waitReserved(ctx, n, changed)
			if done || err != nil {
				return err
			}
			continue // the bucket changed: reserve again at the new rate
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// waitReserved reserves n tokens and waits for them. It reports done once
// they are spent, and false (with the reservation cancelled) when the
// bucket changed first.
func (l *Limiter) waitReserved(ctx context.Context, n int, changed <-chan struct{}) (bool, error) {
	now := time.Now()
	r := l.bucket.ReserveN(now, n)
	if !r.OK() {
		return false, nil // the burst shrank meanwhile: look again
	}
	d := r.DelayFrom(now)
	if d == 0 {
		return true, nil
	}
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now) < d {
		r.CancelAt(now)
		return false, fmt.Errorf("tollgate: WaitN(n=%d) would exceed the context deadline at the rate of pool %q's share (%v per second)", n, l.pool, float64(l.bucket.Limit()))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		r.Cancel()
		return false, ctx.Err()
	case <-changed:
		r.Cancel()
		return false, nil
	}
}

// SetWant changes the rate this process would use; the next refresh,
// made at once, asks for it.
func (l *Limiter) SetWant(want float64) error {
	if !(want > 0) || math.IsInf(want, 0) {
		return fmt.Errorf("tollgate: SetWant(%v): want a rate above 0 tokens per second", want)
	}
	l.mu.Lock()
	l.want = want
	l.mu.Unlock()
	l.kickRefresh()
	return nil
}

// Report counts one outcome of work done under the Limiter, classified by
// the Client's Classifier from the work's error, for the pool's adaptive
// limits (see Client.Report); latency is how long the work took (0: not
// measured).
func (l *Limiter) Report(err error, latency time.Duration) {
	l.c.Report(l.pool, l.c.classify(err), latency)
}

// Close stops the Limiter and gives its share back (waiting at most 5s for
// the server); waiting calls fail with ErrLimiterClosed. Close is
// idempotent.
func (l *Limiter) Close() error {
	l.stop()
	<-l.done
	l.mu.Lock()
	id := l.share.id
	l.share.id = ""
	l.setLocked(stateClosed, ErrLimiterClosed)
	l.mu.Unlock()
	l.c.forgetShare(l.pool, id)
	if id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(l.c.ctx, releaseTimeout)
	defer cancel()
	err := l.c.releaseShare(ctx, l.pool, id)
	var e *Error
	if errors.As(err, &e) && e.Is(apierr.ErrShareNotFound) || errors.Is(err, ErrClosed) {
		err = nil // expired already, or the Client is closed: it expires by itself
	}
	return err
}

// setLocked moves the Limiter to st (err for stateRefused and stateClosed)
// and sets the local bucket to what st spends, waking waiters. A bucket
// that starts spending starts empty: no burst comes for free.
func (l *Limiter) setLocked(st limiterState, err error) {
	var lim rate.Limit
	var burst int
	switch st {
	case stateShare:
		lim, burst = rate.Limit(l.share.rate), l.share.burst
	case stateSafe:
		if l.share.safeRate > 0 {
			lim, burst = rate.Limit(l.share.safeRate), max(1, int(math.Ceil(l.share.safeRate)))
		}
	}
	l.state, l.err = st, err
	now := time.Now()
	if l.bucket.Limit() != lim || l.bucket.Burst() != burst {
		l.bucket.SetLimitAt(now, lim)
		l.bucket.SetBurstAt(now, burst)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}
