package limits

import (
	"strings"
	"testing"
)

// FitFiles keeps descriptors out of both listeners' reach, and gives the
// HTTP listener at most an eighth of the rest: with 20,000 files the
// defaults fit; with 1,024, both caps come down and it says so.
func TestFitFiles(t *testing.T) {
	l := Limits{}.WithDefaults()
	if got, note := l.FitFiles(20_000); got.MaxConns != DefaultMaxConns || got.MaxHTTPConns != DefaultMaxHTTPConns || note != "" {
		t.Fatalf("20,000 files: %d gRPC and %d HTTP connections (%q); want the defaults", got.MaxConns, got.MaxHTTPConns, note)
	}
	got, note := l.FitFiles(1024)
	if got.MaxConns+got.MaxHTTPConns > 1024-DefaultFileReserve || got.MaxHTTPConns > (1024-DefaultFileReserve)/8 || got.MaxConns < 512 {
		t.Fatalf("1,024 files: %d gRPC and %d HTTP connections", got.MaxConns, got.MaxHTTPConns)
	}
	if !strings.Contains(note, "--max-conns") || !strings.Contains(note, "ulimit") {
		t.Fatalf("note %q does not say what was lowered and how to raise it", note)
	}
	l.MaxConns, l.MaxHTTPConns = -1, -1
	if got, _ := l.FitFiles(20_000); got.MaxConns <= 0 || got.MaxHTTPConns <= 0 || got.MaxConns+got.MaxHTTPConns > 20_000-2_500 {
		t.Fatalf("no limits, 20,000 files: %d gRPC and %d HTTP connections; want both bounded with a reserve", got.MaxConns, got.MaxHTTPConns)
	}
}

// A bound on /metrics below -1 (no bound) is refused, naming the flag.
func TestValidateMetricsPools(t *testing.T) {
	for _, n := range []int{-1, 0, 1, DefaultMetricsPools} {
		if err := (Limits{MetricsPools: n}).Validate(); err != nil {
			t.Errorf("--metrics-pools %d: %v", n, err)
		}
	}
	if err := (Limits{MetricsPools: -5}).Validate(); err == nil || !strings.Contains(err.Error(), "--metrics-pools -5") {
		t.Fatalf("--metrics-pools -5: %v; want it refused, naming the flag", err)
	}
}
