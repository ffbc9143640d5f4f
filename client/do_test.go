package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestDo(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	ran := false
	err := c.Do(ctx(t), "db", func(ctx context.Context) error {
		ran = true
		if st := ts.status("db"); st.Held != 1 {
			t.Errorf("held %d during fn", st.Held)
		}
		return ctx.Err()
	})
	if err != nil || !ran {
		t.Fatalf("Do: ran=%v err=%v", ran, err)
	}
	if st := ts.status("db"); st.Held != 0 || st.Released != 1 {
		t.Fatalf("after Do: held=%d released=%d", st.Held, st.Released)
	}
}

func TestDoReleasesOnError(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	boom := errors.New("boom")
	if err := c.Do(ctx(t), "db", func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Do returned %v; want fn's error", err)
	}
	if st := ts.status("db"); st.Held != 0 || st.Released != 1 {
		t.Fatalf("after Do: held=%d released=%d", st.Held, st.Released)
	}
}

func TestDoReleasesOnPanic(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v; want the panic to continue", p)
			}
		}()
		_ = c.Do(ctx(t), "db", func(context.Context) error { panic("boom") })
		t.Fatal("Do returned after a panic")
	}()
	if st := ts.status("db"); st.Held != 0 || st.Released != 1 {
		t.Fatalf("after a panic in Do: held=%d released=%d", st.Held, st.Released)
	}
}

func TestDoReleasesWhenCallerCtxEnds(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	cctx, cancel := context.WithCancel(ctx(t))
	err := c.Do(cctx, "db", func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if err != context.Canceled {
		t.Fatalf("Do returned %v", err)
	}
	if st := ts.status("db"); st.Held != 0 || st.Released != 1 {
		t.Fatalf("after Do: held=%d released=%d", st.Held, st.Released)
	}
}

func TestDoReportsOverlap(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	err := c.Do(ctx(t), "db", func(ctx context.Context) error {
		ts.clock.Advance(2 * time.Minute) // the lease expires on the server
		<-ctx.Done()                      // and fn's context ends
		mustIs(t, context.Cause(ctx), apierr.ErrLeaseExpired)
		return nil // but fn claims success
	}, client.WithTTL(time.Minute))
	mustIs(t, err, client.ErrLeaseLost)
	if !strings.Contains(err.Error(), "overlapped") {
		t.Fatalf("error %q does not say the work may have overlapped", err)
	}
}

func TestDoAcquireError(t *testing.T) {
	ts := newTestServer(t)
	c := ts.dial()
	err := c.Do(ctx(t), "nope", func(context.Context) error {
		t.Fatal("fn ran without a lease")
		return nil
	})
	mustIs(t, err, apierr.ErrPoolNotFound)
}
