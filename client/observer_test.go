package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// observer records what a Client reports.
type observer struct {
	mu       sync.Mutex
	acquires []client.AcquireEvent
	work     []client.WorkEvent
}

func (o *observer) AcquireDone(ev client.AcquireEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acquires = append(o.acquires, ev)
}

func (o *observer) WorkDone(ev client.WorkEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.work = append(o.work, ev)
}

func (o *observer) works() []client.WorkEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]client.WorkEvent(nil), o.work...)
}

func (o *observer) acquired() []client.AcquireEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]client.AcquireEvent(nil), o.acquires...)
}

// httpError is an error of an HTTP API, for a caller-supplied classifier.
type httpError struct{ status int }

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d", e.status) }

func TestObserver(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	obs := &observer{}
	logs := &logRecorder{}
	// A 404 is a success of the API (the thing is not there); a 429 is
	// the API pushing back.
	classify := func(err error) client.Outcome {
		var he *httpError
		if errors.As(err, &he) && he.status == 404 {
			return client.OutcomeSuccess
		}
		return client.DefaultClassifier(err)
	}
	c := ts.dialWith(client.Dialer{Observer: obs, Classifier: classify, Logger: slog.New(logs)})

	runs := []struct {
		err  error
		want client.Outcome
	}{
		{nil, client.OutcomeSuccess},
		{&httpError{404}, client.OutcomeSuccess},
		{&httpError{429}, client.OutcomeError},
		{fmt.Errorf("calling: %w", context.DeadlineExceeded), client.OutcomeTimeout},
		{context.Canceled, client.OutcomeCanceled},
	}
	for _, r := range runs {
		if err := c.Do(ctx(t), "db", func(context.Context) error { return r.err }); err != r.err {
			t.Fatalf("Do returned %v; want %v", err, r.err)
		}
	}
	_, err := c.TryAcquire(ctx(t), "nope")
	mustIs(t, err, apierr.ErrPoolNotFound)

	work := obs.works()
	if len(work) != len(runs) {
		t.Fatalf("%d WorkDone events; want %d", len(work), len(runs))
	}
	for i, ev := range work {
		if ev.Pool != "db" || ev.Err != runs[i].err || ev.Outcome != runs[i].want || ev.LocalOnly || ev.LeaseLost ||
			ev.Wait < 0 || ev.Hold < 0 {
			t.Errorf("event %d: %+v; want outcome %v", i, ev, runs[i].want)
		}
	}
	acq := obs.acquired()
	if len(acq) != len(runs)+1 {
		t.Fatalf("%d AcquireDone events; want %d", len(acq), len(runs)+1)
	}
	last := acq[len(acq)-1]
	if last.Pool != "nope" || !last.Try || !errors.Is(last.Err, apierr.ErrPoolNotFound) {
		t.Fatalf("failed acquire reported as %+v", last)
	}
	if n := logs.count(slog.LevelDebug, "work done"); n != len(runs) {
		t.Fatalf("%d debug logs of work done; want %d", n, len(runs))
	}
}

func TestObserverSeesLeaseLost(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	obs := &observer{}
	c := ts.dialWith(client.Dialer{Observer: obs})
	err := c.Do(ctx(t), "db", func(ctx context.Context) error {
		if _, err := ts.srv.Engine().Release("db", client.LeaseFromContext(ctx).FencingToken()); err != nil {
			t.Error(err)
		}
		<-ctx.Done() // the next renew (within TTL/3) is refused
		return nil
	}, client.WithTTL(300*time.Millisecond))
	mustIs(t, err, client.ErrLeaseLost)
	if work := obs.works(); len(work) != 1 || !work[0].LeaseLost || work[0].Outcome != client.OutcomeSuccess {
		t.Fatalf("events %+v; want one success with LeaseLost", work)
	}
}

// timeoutError is a net.Error-like timeout.
type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }
func (timeoutError) Timeout() bool { return true }

func TestDefaultClassifier(t *testing.T) {
	for _, c := range []struct {
		err  error
		want client.Outcome
	}{
		{nil, client.OutcomeSuccess},
		{errors.New("x"), client.OutcomeError},
		{context.DeadlineExceeded, client.OutcomeTimeout},
		{fmt.Errorf("wrapped: %w", os.ErrDeadlineExceeded), client.OutcomeTimeout},
		{fmt.Errorf("get: %w", timeoutError{}), client.OutcomeTimeout},
		{status.Error(codes.DeadlineExceeded, "slow"), client.OutcomeTimeout},
		{context.Canceled, client.OutcomeCanceled},
		{status.Error(codes.Canceled, "gone"), client.OutcomeCanceled},
		{status.Error(codes.Unavailable, "down"), client.OutcomeError},
	} {
		if got := client.DefaultClassifier(c.err); got != c.want {
			t.Errorf("DefaultClassifier(%v) = %v; want %v", c.err, got, c.want)
		}
	}
	for o, s := range map[client.Outcome]string{
		client.OutcomeSuccess: "success", client.OutcomeError: "error",
		client.OutcomeTimeout: "timeout", client.OutcomeCanceled: "canceled", 0: "unknown",
	} {
		if o.String() != s {
			t.Errorf("%d.String() = %q; want %q", o, o.String(), s)
		}
	}
}
