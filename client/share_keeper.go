package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is a Limiter's keeper: the goroutine that acquires its share,
// refreshes it every refresh interval over the Client's Session stream,
// applies the changes the server pushes, and falls back
// to the safe rate when the share expires unrefreshed.

// keep runs until ctx ends (Close, or the Client's Close).
func (l *Limiter) keep(ctx context.Context) {
	defer close(l.done)
	defer func() {
		l.mu.Lock()
		if l.state != stateClosed {
			l.setLocked(stateClosed, ErrLimiterClosed)
		}
		l.mu.Unlock()
	}()
	failures := 0
	var next time.Time // when the live share is to be refreshed
	for ctx.Err() == nil {
		l.mu.Lock()
		g, st := l.share, l.state
		l.mu.Unlock()
		if g.id == "" {
			sent, err := l.acquire(ctx)
			if err == nil {
				failures = 0
				next = sent.Add(l.refreshInterval())
				continue
			}
			if ctx.Err() != nil {
				return
			}
			l.refused(err)
			if _, err := pauseFor(ctx, shareBackoff.delay(failures, time.Time{}), l.kick); err != nil {
				return
			}
			failures++
			continue
		}
		now := time.Now()
		expired := !now.Before(g.deadline)
		if expired && st == stateShare {
			l.expireLocally()
		}
		if now.Before(next) {
			d := next.Sub(now)
			if !expired {
				d = min(d, g.deadline.Sub(now))
			}
			kicked, err := pauseFor(ctx, d, l.kick)
			if err != nil {
				return
			}
			if !kicked && time.Now().Before(next) {
				continue // the deadline check decides
			}
		}
		sent, err := l.refresh(ctx, g)
		var e *Error
		switch {
		case err == nil:
			failures = 0
			next = sent.Add(l.refreshInterval())
		case ctx.Err() != nil:
			return
		case errors.As(err, &e) && e.Is(apierr.ErrShareNotFound):
			l.dropShare(g.id, stateWaiting, nil) // the server dropped it: get a new one at once
		case errors.As(err, &e) && e.Code != codes.Unavailable:
			l.dropShare(g.id, stateRefused, err) // the pool was deleted or lost its rate
		default: // unreachable, or no answer before the deadline: retry until it
			if !errors.Is(err, context.DeadlineExceeded) {
				l.c.log.Warn("tollgate: share refresh failed; retrying", "pool", l.pool, "share_id", g.id, "err", err)
			}
			next = time.Now().Add(min(retryBackoff.delay(failures, g.deadline), g.refresh/10))
			failures++
		}
	}
}

// kickRefresh asks the keeper to refresh (or acquire) at once.
func (l *Limiter) kickRefresh() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// pauseFor waits d, or until a kick (reporting it) or ctx ends
// (returning its error).
func pauseFor(ctx context.Context, d time.Duration, kick chan struct{}) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false, nil
	case <-kick:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// refreshInterval is the live share's refresh interval.
func (l *Limiter) refreshInterval() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.share.refresh
}

// acquire asks for a share, waiting for the server as long as ctx allows,
// and applies the grant. It returns when the request was sent.
func (l *Limiter) acquire(ctx context.Context) (time.Time, error) {
	l.mu.Lock()
	want := l.want
	l.mu.Unlock()
	a, err := l.c.roundTrip(ctx, op{pool: l.pool, build: func(int) (*tollgatev1.SessionRequest, error) {
		req := &tollgatev1.AcquireShareRequest{Pool: l.pool, Want: want}
		if l.weight != 1 {
			w := l.weight
			req.Weight = &w
		}
		if l.ttl > 0 {
			req.Ttl = durationpb.New(l.ttl)
		}
		return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_AcquireShare{AcquireShare: req}}, nil
	}})
	if err != nil {
		return time.Time{}, err
	}
	sh := a.resp.GetAcquireShare().GetShare()
	l.mu.Lock()
	l.share = shareGrant{id: sh.GetId()}
	l.applyLocked(sh, a.sentAt)
	l.mu.Unlock()
	l.c.rememberShare(l.pool, sh.GetId(), l)
	return a.sentAt, nil
}

// refresh refreshes g, waiting for the server until g's local deadline
// (once it has passed, as long as ctx allows, like acquire), and applies
// the answer. It returns when the request was sent.
func (l *Limiter) refresh(ctx context.Context, g shareGrant) (time.Time, error) {
	if time.Now().Before(g.deadline) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, g.deadline)
		defer cancel()
	}
	l.mu.Lock()
	want := l.want
	l.mu.Unlock()
	a, err := l.c.roundTrip(ctx, op{pool: l.pool, resetOnDeadline: true, build: func(int) (*tollgatev1.SessionRequest, error) {
		w := want
		req := &tollgatev1.RefreshShareRequest{Pool: l.pool, ShareId: g.id, Want: &w}
		if g.rate > 0 { // so that a restarted server re-adopts the share (docs/recovery.md)
			r := g.rate
			req.GrantedRate = &r
		}
		return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_RefreshShare{RefreshShare: req}}, nil
	}})
	if err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	if l.share.id == g.id {
		l.applyLocked(a.resp.GetRefreshShare().GetShare(), a.sentAt)
	}
	l.mu.Unlock()
	return a.sentAt, nil
}

// applyLocked makes sh (an answer to a request sent at sent) the live
// share, unless a newer version of it is known, and extends the local
// deadline: the server counts the TTL from when it got the request, which
// is after it was sent.
func (l *Limiter) applyLocked(sh *tollgatev1.RateShare, sent time.Time) {
	g := &l.share
	ttl := sh.GetTtl().AsDuration()
	if ttl <= 0 {
		ttl = defaultTTL
	}
	g.ttl, g.safeRate = ttl, sh.GetSafeRate()
	g.refresh = sh.GetRefreshInterval().AsDuration()
	if g.refresh <= 0 {
		g.refresh = ttl / 3
	}
	g.deadline = sent.Add(ttl - l.c.safetyMargin(ttl))
	if sh.GetVersion() < g.version && l.state == stateShare {
		return // an event already brought a newer grant
	}
	g.version = sh.GetVersion()
	g.rate, g.burst = sh.GetRate(), int(sh.GetBurst())
	l.setLocked(stateShare, nil)
}

// expireLocally stops spending a share whose local deadline passed
// without a refresh: the server may have given its rate to others, so the
// Limiter spends the pool's safe rate until it gets a share again. It
// keeps trying to refresh the share: the server may still hold it (its
// clock counts the TTL from a later refresh, or the answers were only
// late), and a new share would get only what the old one, spent by no one
// until it expires, leaves free.
func (l *Limiter) expireLocally() {
	l.mu.Lock()
	l.setLocked(stateSafe, nil)
	safe := l.share.safeRate
	l.mu.Unlock()
	l.c.log.Warn("tollgate: rate share expired without a refresh (server unreachable); using the pool's safe rate", "pool", l.pool, "safe_rate", safe)
}

// dropShare forgets share id (the server no longer holds it) and moves to
// st, which spends nothing; a Limiter spending the safe rate keeps it
// when st is stateWaiting, until it gets a share again.
func (l *Limiter) dropShare(id string, st limiterState, err error) {
	l.mu.Lock()
	if st == stateWaiting && l.state == stateSafe {
		st = stateSafe
	}
	if l.share.id == id {
		l.share.id = ""
		l.setLocked(st, err)
	}
	l.mu.Unlock()
	l.c.forgetShare(l.pool, id)
}

// refused records a failed acquire: a refusal by the server makes Wait
// fail with it; a server that cannot be reached changes nothing (a
// Limiter whose share expired keeps spending the safe rate).
func (l *Limiter) refused(err error) {
	var e *Error
	if !errors.As(err, &e) || e.Code == codes.Unavailable {
		return
	}
	l.mu.Lock()
	if l.state != stateClosed {
		l.setLocked(stateRefused, err)
	}
	l.mu.Unlock()
}

// releaseShare gives a share back.
func (c *Client) releaseShare(ctx context.Context, pool, id string) error {
	_, err := c.roundTrip(ctx, op{pool: pool, build: func(int) (*tollgatev1.SessionRequest, error) {
		return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_ReleaseShare{ReleaseShare: &tollgatev1.ReleaseShareRequest{Pool: pool, ShareId: id}}}, nil
	}})
	return err
}
