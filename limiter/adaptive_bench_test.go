package limiter

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAdaptiveHotPath measures Acquire plus Release in one pool with
// adaptive control off and on (nothing reported: adaptive control must
// cost the grant path nothing), and Acquire plus ReleaseWithOutcome (each
// release feeds the window).
func BenchmarkAdaptiveHotPath(b *testing.B) {
	for _, bc := range []struct {
		name     string
		adaptive bool
		outcome  bool
	}{{"off", false, false}, {"on", true, false}, {"on+outcome", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			e := New(Options{})
			defer e.Close()
			cfg := PoolConfig{Name: "p", ConcurrencyLimit: MaxConcurrency, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour}
			cfg.Adaptive.Enabled = bc.adaptive
			if _, err := e.CreatePool(cfg); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				l, err := e.Acquire(ctx, AcquireRequest{Pool: "p", Weight: 1})
				if err != nil {
					b.Fatal(err)
				}
				if bc.outcome {
					_, err = e.Release("p", l.FencingToken, WithOutcome(OutcomeSuccess, time.Millisecond))
				} else {
					_, err = e.Release("p", l.FencingToken)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReport measures one batched report of one pool.
func BenchmarkReport(b *testing.B) {
	e := New(Options{})
	defer e.Close()
	if _, err := e.CreatePool(PoolConfig{Name: "p", Rate: 1000, Adaptive: AdaptiveConfig{Enabled: true}}); err != nil {
		b.Fatal(err)
	}
	rs := []OutcomeReport{{Pool: "p", Successes: 100, Errors: 1, LatencyCount: 101, LatencySum: time.Second, LatencyMax: 20 * time.Millisecond}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := e.Report(rs); err != nil {
			b.Fatal(err)
		}
	}
}
