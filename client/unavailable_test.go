package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// logRecorder is a slog.Handler that keeps the records it is given.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// count returns how many records at level have a message containing s.
func (h *logRecorder) count(level slog.Level, s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message, s) {
			n++
		}
	}
	return n
}

func TestFailWhenUnavailable(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1, Rate: 100})
	c := ts.dialWith(client.Dialer{Unavailable: client.FailWhenUnavailable()})

	if err := c.Do(ctx(t), "db", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	err := c.Do(ctx(t), "db", func(context.Context) error {
		t.Error("ran without the server")
		return nil
	})
	mustIs(t, err, client.ErrUnavailable)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("status code %v; want UNAVAILABLE", status.Code(err))
	}
	_, err = c.Acquire(ctx(t), "db")
	mustIs(t, err, client.ErrUnavailable)
	_, err = c.TryAcquire(ctx(t), "db")
	mustIs(t, err, client.ErrUnavailable)
	mustIs(t, c.Take(ctx(t), "db", 1), client.ErrUnavailable)

	// Back to normal once the server is back.
	ts.start()
	waitFor(t, "a Do through the restarted server", func() bool {
		return c.Do(ctx(t), "db", func(context.Context) error { return nil }) == nil
	})
}

func TestFailWhenUnavailableBeforeFirstConnection(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	ts.stop()
	c := ts.dialWith(client.Dialer{Unavailable: client.FailWhenUnavailable()})
	_, err := c.Acquire(ctx(t), "db")
	mustIs(t, err, client.ErrUnavailable)
	if !strings.Contains(err.Error(), ts.addr) {
		t.Fatalf("error %q does not name the address", err)
	}
}

// The default waits for the server as long as the context allows.
func TestWaitForServerIsTheDefault(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	ts.stop()
	c := ts.dial()
	short, cancel := context.WithTimeout(ctx(t), 200*time.Millisecond)
	defer cancel()
	err := c.Do(short, "db", func(context.Context) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do returned %v; want the context's deadline (it waits for the server)", err)
	}
	// The error says no server answered, where, and the last connection
	// error.
	for _, want := range []string{"no server answered at " + ts.addr, "last connection error", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Do's error %q does not say %q", err, want)
		}
	}
	got := make(chan error, 1)
	go func() { got <- c.Do(ctx(t), "db", func(context.Context) error { return nil }) }()
	ts.start()
	if err := recv(t, "Do", got); err != nil {
		t.Fatal(err)
	}
}

func TestLocalLimitOnly(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	logs := &logRecorder{}
	obs := &observer{}
	c := ts.dialWith(client.Dialer{Unavailable: client.LocalLimitOnly(2), Logger: slog.New(logs), Observer: obs})
	ts.stop()

	const tasks = 10
	var running concurrency
	var starts atomic.Int64
	reached := make(chan struct{})
	var once sync.Once
	g := newGroup(t, c, ctx(t), "db", client.WithMaxInFlight(tasks))
	for range tasks {
		g.Go(func(ctx context.Context) error {
			defer running.leave()
			if running.enter() == 2 {
				once.Do(func() { close(reached) })
			}
			if starts.Add(1) <= 2 {
				recv(t, "two local runs at once", reached)
			}
			if client.LeaseFromContext(ctx) != nil {
				t.Error("a local-only run has a lease")
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if m := running.most.Load(); m != 2 {
		t.Fatalf("%d local runs at once; the local limit is 2 and it must be reached", m)
	}
	if n := logs.count(slog.LevelWarn, "NOT the global one"); n != tasks {
		t.Fatalf("%d WARN logs of local-only runs; want one per run (%d)", n, tasks)
	}
	work := obs.works()
	if len(work) != tasks {
		t.Fatalf("%d WorkDone events; want %d", len(work), tasks)
	}
	for _, ev := range work {
		if !ev.LocalOnly || ev.Outcome != client.OutcomeSuccess {
			t.Fatalf("event %+v: want LocalOnly success", ev)
		}
	}

	// A weight above the local limit cannot run.
	err := c.Do(ctx(t), "db", func(context.Context) error { return nil }, client.WithWeight(3))
	mustIs(t, err, apierr.ErrInvalidArgument)
	// Plain acquires have nothing to run locally: they fail.
	_, err = c.Acquire(ctx(t), "db")
	mustIs(t, err, client.ErrUnavailable)

	// Once the server is back, work is globally limited again.
	ts.start()
	waitFor(t, "a run under a lease", func() bool {
		var leased bool
		err := c.Do(ctx(t), "db", func(ctx context.Context) error {
			leased = client.LeaseFromContext(ctx) != nil
			return nil
		})
		return err == nil && leased
	})
}

func TestDialRefusesBadLocalLimit(t *testing.T) {
	if _, err := (client.Dialer{Unavailable: client.LocalLimitOnly(0)}).Dial("a:1"); err == nil {
		t.Fatal("Dial accepted LocalLimitOnly(0)")
	}
}

func TestUnavailablePolicyString(t *testing.T) {
	for p, want := range map[client.UnavailablePolicy]string{
		{}:                           "wait-for-server",
		client.WaitForServer():       "wait-for-server",
		client.FailWhenUnavailable(): "fail-when-unavailable",
		client.LocalLimitOnly(3):     "local-limit-only(3)",
	} {
		if p.String() != want {
			t.Errorf("%v.String() = %q; want %q", p, p.String(), want)
		}
	}
	if !errors.Is(client.ErrUnavailable, client.ErrUnavailable) {
		t.Fatal("ErrUnavailable")
	}
}
