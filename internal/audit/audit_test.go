package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func TestAdminChange(t *testing.T) {
	// A pool as the server answers it: the fields left to their defaults
	// are filled in.
	pool := poolconv.ToProto(limiter.PoolConfig{Name: "db", Description: `the "main" db`, ConcurrencyLimit: 10, MaxLeaseTTL: time.Hour}.WithDefaults(),
		time.Time{}, time.Time{})
	ids := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprint("r", i)
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		req, resp any
		want      events.Event
	}{
		{"create shows the fields off their defaults", &tollgatev1.CreatePoolRequest{}, &tollgatev1.CreatePoolResponse{Pool: pool},
			events.Event{Type: events.PoolCreated, Pool: "db", Detail: `description="the \"main\" db" concurrency_limit=10 max_lease_ttl=1h0m0s`}},
		{"update shows the fields of its mask", &tollgatev1.UpdatePoolRequest{UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"rate", "default_lease_ttl", "adaptive"}}},
			&tollgatev1.UpdatePoolResponse{Pool: pool},
			events.Event{Type: events.PoolUpdated, Pool: "db", Detail: "rate=0 default_lease_ttl=15s"}},
		{"delete", &tollgatev1.DeletePoolRequest{Name: "db"}, nil, events.Event{Type: events.PoolDeleted, Pool: "db"}},
		{"forced delete", &tollgatev1.DeletePoolRequest{Name: "db", Force: true}, nil, events.Event{Type: events.PoolDeleted, Pool: "db", Detail: "force"}},
		{"suspend", &tollgatev1.SuspendPoolRequest{Name: "db"}, nil, events.Event{Type: events.PoolUpdated, Pool: "db", Detail: "suspended"}},
		{"suspend revoking", &tollgatev1.SuspendPoolRequest{Name: "db", RevokeHeld: true}, nil,
			events.Event{Type: events.PoolUpdated, Pool: "db", Detail: "suspended, revoking held leases"}},
		{"resume", &tollgatev1.ResumePoolRequest{Name: "db"}, nil, events.Event{Type: events.PoolUpdated, Pool: "db", Detail: "resumed"}},
		{"add", &tollgatev1.AddResourcesRequest{Pool: "gpu", Resources: []*tollgatev1.Resource{{Id: "a"}, {Id: "b"}}}, nil,
			events.Event{Type: events.ResourcesAdded, Pool: "gpu", ResourceIDs: []string{"a", "b"}, Detail: "a, b"}},
		{"remove names at most 8 ids", &tollgatev1.RemoveResourcesRequest{Pool: "gpu", Ids: ids(9), Reason: "maintenance"},
			&tollgatev1.RemoveResourcesResponse{Removed: 7, Removing: 1, Revoked: 2},
			events.Event{Type: events.ResourcesRemoved, Pool: "gpu", ResourceIDs: ids(9),
				Detail: "r0, r1, r2, r3, r4, r5, r6, r7, ... (9 in all): 7 removed, 1 leaving when released, 2 leases revoked (maintenance)"}},
	} {
		got, ok := AdminChange(tc.req, tc.resp)
		if !ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s:\n got %+v (%v)\nwant %+v", tc.name, got, ok, tc.want)
		}
	}
	if ev, ok := AdminChange(&tollgatev1.GetPoolRequest{Name: "db"}, &tollgatev1.GetPoolResponse{}); ok {
		t.Errorf("a read made an event: %+v", ev)
	}
}

func TestAdminChangeBoundsWhatACallerSent(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	ev, _ := AdminChange(&tollgatev1.RemoveResourcesRequest{Pool: "gpu", Ids: []string{"a"}, Reason: long}, &tollgatev1.RemoveResourcesResponse{})
	created, _ := AdminChange(&tollgatev1.CreatePoolRequest{}, &tollgatev1.CreatePoolResponse{Pool: &tollgatev1.Pool{Name: "db", Description: long}})
	for _, d := range []string{ev.Detail, created.Detail} {
		if len(d) > 300 {
			t.Errorf("detail of %d bytes keeps what the caller sent unbounded", len(d))
		}
	}
}

func TestLeaseEnded(t *testing.T) {
	l := limiter.Lease{Pool: "db", FencingToken: 42, ClientID: "w1", Description: "job", Weight: 2, TTL: 10 * time.Second,
		ExpireTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	expired := LeaseEnded(limiter.LeaseEnded{Lease: l, Reason: limiter.EndExpired})
	want := events.Event{Time: l.ExpireTime, Type: events.LeaseExpired, Pool: "db", LeaseID: "42", ClientID: "w1", Description: "job",
		Detail: "weight 2, ttl 10s"}
	if fmt.Sprint(expired) != fmt.Sprint(want) {
		t.Errorf("expired:\n got %+v\nwant %+v", expired, want)
	}
	revoked := LeaseEnded(limiter.LeaseEnded{Lease: l, Reason: limiter.EndRevoked, Message: "stuck", Actor: "ops"})
	want = events.Event{Type: events.LeaseRevoked, Pool: "db", LeaseID: "42", ClientID: "w1", Description: "job", Actor: "ops",
		Detail: `revoked: "stuck"; weight 2, ttl 10s`}
	if fmt.Sprint(revoked) != fmt.Sprint(want) {
		t.Errorf("revoked:\n got %+v\nwant %+v", revoked, want)
	}
	deleted := LeaseEnded(limiter.LeaseEnded{Lease: l, Reason: limiter.EndPoolDeleted})
	if deleted.Type != events.LeaseRevoked || deleted.Detail != "pool deleted; weight 2, ttl 10s" || !deleted.Time.IsZero() {
		t.Errorf("pool deleted: %+v", deleted)
	}
}

func TestPoolEvent(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		ev        limiter.PoolEvent
		typ, want string
	}{
		{limiter.PoolEvent{Type: limiter.PoolThrottled, Reason: limiter.ThrottleErrors, ConcurrencyLimit: 9, PrevConcurrencyLimit: 10, ConfiguredConcurrencyLimit: 10,
			Rate: 5, PrevRate: 5, ConfiguredRate: 5, Samples: 120, ErrorRatio: 0.35},
			events.PoolThrottled, "concurrency 10 → 9 (configured 10); errors: 35.0% of 120 outcomes were errors or timeouts"},
		{limiter.PoolEvent{Type: limiter.PoolRelieved, Rate: 2.5, PrevRate: 1.25, ConfiguredRate: 3.3333333, Samples: 10,
			Latency: 20 * time.Millisecond, Baseline: 10 * time.Millisecond},
			events.PoolRelieved, "rate 1.25 → 2.5/s (configured 3.333/s); healthy: 0.0% of 10 outcomes were errors or timeouts, mean latency 20ms (baseline 10ms)"},
		{limiter.PoolEvent{Type: limiter.PoolOverload, Waiting: 48, Mark: 40, Held: 10, ConcurrencyLimit: 8, ConfiguredConcurrencyLimit: 10, Suppressed: 12},
			events.PoolOverload, "48 waiting, at or above the overload mark 40; held 10 of 8 (configured 10); 12 repeats suppressed"},
		{limiter.PoolEvent{Type: limiter.PoolDrained}, events.PoolDrained, "nothing held and nothing waiting"},
		{limiter.PoolEvent{Type: limiter.PoolNearFull, Utilisation: 0.95, Mark: 0.9, Held: 19, ConcurrencyLimit: 20, ConfiguredConcurrencyLimit: 20, Waiting: 3},
			events.PoolNearFull, "utilisation 95%, at or above the near-full mark 90%; held 19 of 20, 3 waiting"},
		{limiter.PoolEvent{Type: limiter.PoolLowUtilisation, Utilisation: 0.125, Mark: 0.2, Period: time.Hour, Held: 1},
			events.PoolLowUtilisation, "utilisation at most 12.5% for 1h0m0s, below the low-utilisation mark 20%; held 1"},
	} {
		tc.ev.Pool, tc.ev.Time = "db", at
		got := PoolEvent(tc.ev)
		if got.Type != tc.typ || got.Pool != "db" || !got.Time.Equal(at) || got.Detail != tc.want {
			t.Errorf("%v:\n got %s %q\nwant %s %q", tc.ev.Type, got.Type, got.Detail, tc.typ, tc.want)
		}
	}
}
