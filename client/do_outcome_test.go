package client_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// apiStatus is an error status of a protected HTTP API.
type apiStatus struct{ code int }

func (e apiStatus) Error() string { return "HTTP " + strconv.Itoa(e.code) }

// TestDoReportsOutcomes: Do reports its fn's outcome with the release: nil
// is a success, DeadlineExceeded a timeout, another error an error, and a
// cancellation nothing; a Classifier can decide otherwise (a 404 is a
// success, a 429 an error).
func TestDoReportsOutcomes(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4})
	c := ts.dialWith(client.Dialer{Classifier: func(err error) client.Outcome {
		var he apiStatus
		if errors.As(err, &he) && he.code == 404 {
			return client.OutcomeSuccess
		}
		return client.DefaultClassifier(err)
	}})
	for _, err := range []error{nil, nil, errors.New("boom"), apiStatus{429}, apiStatus{404}, context.DeadlineExceeded, context.Canceled} {
		_ = c.Do(ctx(t), "db", func(context.Context) error { return err })
	}
	s := ts.status("db")
	if s.SuccessesReported != 3 || s.ErrorsReported != 2 || s.TimeoutsReported != 1 || s.Released != 7 {
		t.Fatalf("outcomes counted: successes %d errors %d timeouts %d (released %d); want 3, 2, 1 (7)", s.SuccessesReported, s.ErrorsReported, s.TimeoutsReported, s.Released)
	}
}

// TestReleaseWithOutcome: a hand-held lease reports its outcome; Release
// still works as before, and reports nothing.
func TestReleaseWithOutcome(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4, Adaptive: limiter.AdaptiveConfig{Enabled: true, MinSamples: 1}})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseWithOutcome(ctx(t), client.OutcomeTimeout, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	s := ts.status("db")
	if s.TimeoutsReported != 1 || s.SuccessesReported != 0 || s.EffectiveConcurrencyLimit != 3 {
		t.Fatalf("after a timeout: %+v", s.AdaptiveStatus)
	}
}
