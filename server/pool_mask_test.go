package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// UpdatePool's mask is read against the Pool message: a path into a
// well-known type is refused, a nested path creates the message it
// enters, and a bad value of a named field changes nothing.
func TestUpdatePoolMaskPaths(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4})
	update := func(p *tollgatev1.Pool, paths ...string) (*tollgatev1.UpdatePoolResponse, error) {
		p.Name = "db"
		return e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: p, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
	}
	for _, path := range []string{"default_lease_ttl.seconds", "adaptive.", "adaptive.enabled.x", "create_time", "resource_kind"} {
		_, err := update(&tollgatev1.Pool{}, path)
		wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	}
	_, err := update(&tollgatev1.Pool{ConcurrencyLimit: 9, RevocationPolicy: 5}, "concurrency_limit", "revocation_policy")
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if info, err := e.srv.Engine().GetPool("db"); err != nil || info.Config.ConcurrencyLimit != 4 {
		t.Fatalf("a refused update changed the pool: %+v, %v", info.Config, err)
	}
	resp, err := update(&tollgatev1.Pool{Adaptive: &tollgatev1.Adaptive{Enabled: true, MinSamples: 3}}, "adaptive.enabled", "adaptive.min_samples")
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetPool().GetAdaptive(); !a.GetEnabled() || a.GetMinSamples() != 3 || a.GetBackoff() != limiter.DefaultAdaptiveBackoff {
		t.Fatalf("adaptive after a nested update: %v", a)
	}
	// A named field left unset is reset to its default; the others stay.
	resp, err = update(&tollgatev1.Pool{}, "adaptive.min_samples", "max_waiters")
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.GetPool(); p.GetAdaptive().GetMinSamples() != limiter.DefaultAdaptiveMinSamples || p.GetMaxWaiters() != limiter.DefaultMaxWaiters || p.GetConcurrencyLimit() != 4 {
		t.Fatalf("after resetting: %v", p)
	}
}
