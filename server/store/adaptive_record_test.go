package store

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// TestAdaptiveRecordRoundTrip: a pool's adaptive settings and safe rate
// survive the store (DESIGN invariant 4).
func TestAdaptiveRecordRoundTrip(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, cfg := range []limiter.PoolConfig{
		{Name: "plain", ConcurrencyLimit: 3},
		{Name: "revoking", ConcurrencyLimit: 3, RevocationPolicy: limiter.RevocationRevoke},
		{Name: "api", Rate: 50, SafeRate: 5, ConcurrencyLimit: 8, Adaptive: limiter.AdaptiveConfig{Enabled: true, Target: limiter.AdaptRate,
			Window: 5 * time.Second, MinSamples: 7, LatencyTolerance: 2.5, MinRate: 3, ProbeInterval: 7 * time.Second}},
	} {
		sp, err := limiter.NewSavedPool(cfg, now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := encode(sp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode([]byte(cfg.Name), b)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Config.Equal(sp.Config) {
			t.Fatalf("round trip of %s:\n got %+v\nwant %+v", cfg.Name, got.Config, sp.Config)
		}
	}
}

// TestRevocationPolicyRecord: a record with an unknown policy is refused
// as damaged, and one without the field (written before it existed) reads
// as wait.
func TestRevocationPolicyRecord(t *testing.T) {
	old := `{"name":"db","concurrency_limit":3,"default_lease_ttl_ns":15000000000,"max_lease_ttl_ns":300000000000,"max_waiters":1024}`
	sp, err := decode([]byte("db"), []byte(old))
	if err != nil || sp.Config.RevocationPolicy != limiter.RevocationWait {
		t.Fatalf("old record: %+v, %v", sp.Config, err)
	}
	bad := `{"name":"db","concurrency_limit":3,"revocation_policy":"kill"}`
	if _, err := decode([]byte("db"), []byte(bad)); err == nil {
		t.Fatal("a record with policy kill was accepted")
	}
}
