package poolsfile

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

func TestPoolsFileAdaptive(t *testing.T) {
	pools, err := Parse("pools.yaml", []byte(`
pools:
  - name: api
    rate: 100
    safe_rate: 5
    adaptive:
      target: rate
      window: 5s
      error_threshold: 0.2
      backoff: 0.8
      latency_tolerance: 3
      probe_interval: 7s
  - name: db
    concurrency: 10
    adaptive: true
  - name: off
    concurrency: 1
    adaptive: {enabled: false, backoff: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	api := pools[0]
	if a := api.Adaptive; !a.Enabled || a.Target != limiter.AdaptRate || a.Window != 5*time.Second || a.ErrorThreshold != 0.2 ||
		a.Backoff != 0.8 || a.LatencyTolerance != 3 || a.MinRate != 1 || api.SafeRate != 5 || a.ProbeInterval != 7*time.Second {
		t.Fatalf("api: %+v", api)
	}
	if a := pools[1].Adaptive; !a.Enabled || a.Backoff != limiter.DefaultAdaptiveBackoff || a.MinConcurrency != 1 || a.ProbeInterval != 5*limiter.DefaultAdaptiveInterval {
		t.Fatalf("db: %+v", a)
	}
	if pools[2].Adaptive != (limiter.AdaptiveConfig{}) {
		t.Fatalf("off: %+v", pools[2].Adaptive)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"pools:\n  - name: a\n    concurrency: 1\n    adaptive: {nope: 1}\n", `unknown field "nope" in adaptive`},
		{"pools:\n  - name: a\n    concurrency: 1\n    adaptive: {target: sideways}\n", "adaptive.target must be all, concurrency or rate"},
		{"pools:\n  - name: a\n    concurrency: 1\n    adaptive: {backoff: 2}\n", "adaptive.backoff"},
		{"pools:\n  - name: a\n    concurrency: 1\n    adaptive: [1]\n", "adaptive must be true, false, or a mapping"},
		{"pools:\n  - name: a\n    rate: 1\n    safe_rate: 2\n", "safe_rate"},
		{"pools:\n  - name: a\n    concurrency: 1\n    adaptive: {window: soon}\n", "adaptive.window must be a duration"},
	} {
		_, err := Parse("pools.yaml", []byte(bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "pools.yaml:") {
			t.Errorf("%q: error %v; want one naming the line and %q", bad.yaml, err, bad.want)
		}
	}
}
