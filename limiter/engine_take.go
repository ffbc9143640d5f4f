package limiter

import (
	"context"
	"errors"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Take takes tokens from a pool's bucket. If they are not available now,
// it reserves them and waits until they are, provided that is within
// maxWait by the engine's clock; otherwise it reserves nothing and fails
// with apierr.ErrRateLimited, whose RetryAfter says how long until they would be.
// If ctx ends during the wait, the reservation is cancelled (its tokens go
// back to the bucket as far as later reservations allow) and Take fails
// with apierr.ErrCanceled or apierr.ErrWaitTimeout.
//
// Errors: apierr.ErrPoolNotFound; apierr.ErrNoRateLimit; apierr.ErrInvalidArgument (tokens < 1
// or above the burst, negative maxWait); apierr.ErrRateLimited; apierr.ErrCanceled;
// apierr.ErrWaitTimeout; apierr.ErrShuttingDown.
func (e *Engine) Take(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (TakeResult, error) {
	res, w, err := e.StartTake(pool, tokens, maxWait)
	if w == nil {
		return res, err
	}
	return w.Await(ctx)
}

// StartTake is Take in two steps, so that a caller serving many requests
// (a server's stream) needs no goroutine while tokens are on their way: it
// takes the tokens at once or fails as Take does, returning a nil wait, or
// else reserves them and returns the wait, whose outcome Await or Notify
// must then learn, once.
func (e *Engine) StartTake(pool string, tokens int64, maxWait time.Duration) (TakeResult, *Wait[TakeResult], error) {
	if tokens < 1 {
		return TakeResult{}, nil, errorf(apierr.ErrInvalidArgument, "tokens %d is invalid; take at least 1", tokens)
	}
	if maxWait < 0 {
		return TakeResult{}, nil, errorf(apierr.ErrInvalidArgument, "max wait %v is negative", maxWait)
	}
	p, r, delay, err := e.takeOrReserve(pool, tokens, maxWait)
	switch {
	case err != nil:
		return TakeResult{}, nil, err
	case delay == 0:
		return TakeResult{Tokens: tokens}, nil, nil
	}
	t := &takeWait{wait: Wait[TakeResult]{p: p}, r: r, tokens: tokens, delay: delay}
	t.wait.kind = t
	p.mu.Lock()
	t.timer = e.clock.AfterFunc(delay, t.ready)
	p.unlock()
	return TakeResult{}, &t.wait, nil
}

// takeWait is a take of StartTake waiting for its reserved tokens: one
// record and a timer, no goroutine.
type takeWait struct {
	wait   Wait[TakeResult]
	r      *rate.Reservation
	tokens int64
	delay  time.Duration
	timer  Timer // guarded by p.mu
}

// quitLocked gives the take up with cause: the reserved tokens go back to
// the bucket as far as later reservations allow.
func (t *takeWait) quitLocked(cause error) {
	p := t.wait.p
	t.timer.Stop()
	p.queue.takes--
	now := p.e.clock.Now()
	t.r.CancelAt(now)
	p.stats.TokensGranted -= t.tokens
	p.waits.addTokens(now, -t.tokens)
	var err error
	switch {
	case cause == nil:
		err = errShuttingDown()
	case errors.Is(cause, context.DeadlineExceeded):
		p.stats.WaitTimeouts++
		err = errorf(apierr.ErrWaitTimeout, "the call's deadline passed while waiting for %d tokens of pool %q", t.tokens, p.name)
	default:
		p.stats.Canceled++
		err = errorf(apierr.ErrCanceled, "the take of %d tokens from pool %q was cancelled while waiting", t.tokens, p.name)
	}
	t.wait.endLocked(TakeResult{}, err)
}

// lateLocked keeps the tokens of a take whose Await gave up after they
// were there.
func (t *takeWait) lateLocked(out *outcome[TakeResult], _ error) (TakeResult, error) {
	return out.val, out.err
}

// ready ends the wait when its tokens are there (its timer).
func (t *takeWait) ready() {
	p := t.wait.p
	p.mu.Lock()
	defer p.unlock()
	if t.wait.endedLocked() {
		return
	}
	p.queue.takes--
	if !p.e.acting() { // tokens reserved before the deadline are not handed out after it
		t.wait.endLocked(TakeResult{}, errNotLeader())
		return
	}
	t.wait.endLocked(TakeResult{Tokens: t.tokens, Waited: t.delay}, nil)
}

// takeOrReserve takes tokens from pool's bucket, reserving them if they
// are not there yet, and returns the pool, the reservation and how long
// until its tokens are there (0: taken now). It reserves nothing, and
// fails, if that is beyond maxWait.
func (e *Engine) takeOrReserve(pool string, tokens int64, maxWait time.Duration) (*pool, *rate.Reservation, time.Duration, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, nil, 0, err
	}
	defer p.unlock()
	if p.bucket == nil {
		return nil, nil, 0, errorf(apierr.ErrNoRateLimit, "pool %q has no rate limit, only a concurrency limit; use Acquire, or give the pool a rate", pool)
	}
	if tokens > p.cfg.Burst {
		return nil, nil, 0, errorf(apierr.ErrInvalidArgument, "tokens %d exceeds pool %q's burst of %d; no wait could satisfy it: take fewer at a time", tokens, pool, p.cfg.Burst)
	}
	now := e.clock.Now()
	r := p.bucket.ReserveN(now, int(tokens))
	delay := r.DelayFrom(now)
	if delay > maxWait {
		r.CancelAt(now)
		p.stats.Rejected++
		if p.bucket.Limit() <= 0 { // rate shares hold the whole rate
			return nil, nil, 0, p.shr.noRefillErr(tokens)
		}
		return nil, nil, 0, &apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonRateLimited, RetryAfter: delay,
			Message: "pool " + quote(pool) + " would have " + itoa(tokens) + " tokens in " + delay.String() + ", beyond the wait limit of " + maxWait.String() + "; retry after that"}
	}
	if delay > 0 && e.waitsStopped() {
		r.CancelAt(now)
		return nil, nil, 0, errShuttingDown()
	}
	if n := p.queue.waiting(); delay > 0 && n >= p.cfg.MaxWaiters {
		r.CancelAt(now)
		p.stats.Rejected++
		return nil, nil, 0, errorf(apierr.ErrQueueFull, "pool %q has %d acquires and takes waiting, its max_waiters; retry later with backoff, or raise max_waiters", pool, n)
	}
	p.stats.TokensGranted += tokens
	p.waits.addTokens(now, tokens) // for the rate's utilisation
	if delay > 0 {
		p.queue.takes++
	}
	return p, r, delay, nil
}
