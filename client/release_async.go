package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ReleaseAsync ends the lease like Release, but without waiting for the
// server: it sends the release on the live Session stream (or, while there
// is none, from the background) and returns at once, so the caller goes
// on after a send rather than a round trip. Done is closed and Err says
// ErrReleased when it returns.
//
// It returns the loss error (matching ErrLeaseLost) for a lease the client
// already knows was lost, and nil otherwise. What the server answers comes
// later and is logged: a refusal because the lease had already ended on the
// server (the work may have overlapped another holder) at warning level.
// A release whose stream breaks before the answer is sent again on the
// next stream, for up to 5 s; one that never gets through leaves the lease
// to expire on the server when its TTL passes, as for any holder that goes
// away. Close waits up to 5 s for the releases still unanswered.
//
// Use Release where the server's word matters (Do and Group do); use
// ReleaseAsync on hot paths that acquire and release many short leases.
func (l *Lease) ReleaseAsync() error {
	_ = l.lockRelease(context.Background()) // only a context's end fails it
	defer l.unlockRelease()
	l.mu.Lock()
	if settled, err := l.settledLocked(); settled {
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	l.finish(leaseReleased, ErrReleased)
	l.mu.Lock()
	l.state = leaseReleased // also an unconfirmed one: this is its retry
	l.mu.Unlock()
	l.c.postRelease(leaseKey{l.pool, l.id})
	return nil
}

// postRelease sends a release of lease k on the live stream of its pool's
// link without waiting for its answer, or from the background while there
// is none; Close waits for it (up to releaseTimeout).
func (c *Client) postRelease(k leaseKey) {
	ln := c.linkFor(k.pool)
	c.mu.Lock()
	var st *stream
	if ln != nil {
		st = ln.cur
	}
	closed := c.closed
	if !closed {
		c.releases.Add(1)
	}
	c.mu.Unlock()
	if closed {
		return
	}
	if st == nil {
		c.retryRelease(k.pool, k.id, "no live stream")
		return
	}
	st.post(k)
}

// releaseAnswered handles the answer to a posted release of lease k, on
// the stream's reader: it must not block.
func (c *Client) releaseAnswered(k leaseKey, a answer) {
	pool, id := k.pool, k.id
	switch se := a.resp.GetError(); {
	case isBroken(a.err):
		c.retryRelease(pool, id, a.err.Error())
		return
	case a.err != nil:
		c.log.Debug("tollgate: a release was not sent", "pool", pool, "lease_id", id, "err", a.err)
	case se == nil:
	case codes.Code(se.GetCode()) == codes.Unavailable:
		c.retryRelease(pool, id, se.GetMessage())
		return
	case codes.Code(se.GetCode()) == codes.NotFound:
		c.log.Warn("tollgate: a released lease had already ended on the server, so the work done under it may have overlapped another holder", "pool", pool, "lease_id", id, "err", fromSessionError(se))
	default:
		c.log.Warn("tollgate: the server refused a release; the lease ends when its TTL passes", "pool", pool, "lease_id", id, "err", fromSessionError(se))
	}
	c.releases.Done()
}

// retryRelease sends a posted release again from the background, through
// roundTrip (which waits for the next stream), for up to releaseTimeout.
func (c *Client) retryRelease(pool, id, why string) {
	ok := c.goBackground(func(ctx context.Context) {
		defer c.releases.Done()
		ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
		_, err := c.roundTrip(ctx, releaseOp(pool, id))
		var e *Error
		if firstGotThere := errors.As(err, &e) && e.Is(apierr.ErrLeaseNotFound); err != nil && !firstGotThere {
			c.log.Warn("tollgate: could not release a lease; the server frees it when its TTL passes", "pool", pool, "lease_id", id, "first_try", why, "err", err)
		}
	})
	if !ok {
		c.releases.Done()
	}
}

// waitReleases waits up to releaseTimeout for the posted releases to be
// answered.
func (c *Client) waitReleases() {
	done := make(chan struct{})
	go func() {
		c.releases.Wait()
		close(done)
	}()
	t := time.NewTimer(releaseTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.log.Warn("tollgate: closing with releases unanswered; the server frees their leases when their TTLs pass")
	}
}
