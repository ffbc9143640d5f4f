package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestPoolLifecycle(t *testing.T) {
	e := newEnv(t)
	created := e.createPool(&tollgatev1.Pool{Name: "db", Description: "orders", ConcurrencyLimit: 5, Rate: 2.5,
		CreateTime: nil, UpdateTime: nil})
	// Defaults are filled in; times are the server's.
	if created.GetBurst() != 3 || created.GetDefaultLeaseTtl().AsDuration() != limiter.DefaultLeaseTTL ||
		created.GetMaxLeaseTtl().AsDuration() != limiter.DefaultMaxLeaseTTL || created.GetMaxWaiters() != limiter.DefaultMaxWaiters {
		t.Fatalf("created pool = %v", created)
	}
	if !created.GetCreateTime().AsTime().Equal(testStart) || !created.GetUpdateTime().AsTime().Equal(testStart) {
		t.Fatalf("times = %v %v", created.GetCreateTime(), created.GetUpdateTime())
	}

	got, err := e.adm.GetPool(e.ctx(), &tollgatev1.GetPoolRequest{Name: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetPool().GetDescription() != "orders" || got.GetPool().GetConcurrencyLimit() != 5 || got.GetStatus() == nil {
		t.Fatalf("GetPool = %v", got)
	}
	if got.GetStatus().GetTokensAvailable() != 3 {
		t.Fatalf("tokens_available = %v, want the burst 3", got.GetStatus().GetTokensAvailable())
	}

	e.clock.Advance(time.Minute)
	up, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool:       &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 9, Description: "ignored: not in the mask", MaxLeaseTtl: dur(time.Hour)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit", "max_lease_ttl"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := up.GetPool()
	if p.GetConcurrencyLimit() != 9 || p.GetMaxLeaseTtl().AsDuration() != time.Hour || p.GetDescription() != "orders" || p.GetRate() != 2.5 {
		t.Fatalf("updated pool = %v", p)
	}
	if !p.GetUpdateTime().AsTime().Equal(testStart.Add(time.Minute)) || !p.GetCreateTime().AsTime().Equal(testStart) {
		t.Fatalf("times after update = %v %v", p.GetCreateTime(), p.GetUpdateTime())
	}

	// A named field left unset goes back to its default.
	up, err = e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool:       &tollgatev1.Pool{Name: "db"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description", "max_lease_ttl", "rate"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p = up.GetPool()
	if p.GetDescription() != "" || p.GetMaxLeaseTtl().AsDuration() != limiter.DefaultMaxLeaseTTL || p.GetRate() != 0 || p.GetBurst() != 0 {
		t.Fatalf("pool after reset = %v", p)
	}

	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "db"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.adm.GetPool(e.ctx(), &tollgatev1.GetPoolRequest{Name: "db"})
	wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
}

func TestDeletePoolBusyAndForce(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	_, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "db"})
	wantStatus(t, err, codes.FailedPrecondition, apierr.ReasonPoolBusy)
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "db", Force: true}); err != nil {
		t.Fatal(err)
	}
	_, err = e.lim.Renew(e.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId()})
	wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
}

func TestAdminCallerErrors(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	ctx := e.ctx()
	inv, ra := codes.InvalidArgument, apierr.ReasonInvalidArgument
	create := func(p *tollgatev1.Pool) func() error {
		return func() error { _, err := e.adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: p}); return err }
	}
	update := func(p *tollgatev1.Pool, paths ...string) func() error {
		return func() error {
			r := &tollgatev1.UpdatePoolRequest{Pool: p}
			if paths != nil {
				r.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
			}
			_, err := e.adm.UpdatePool(ctx, r)
			return err
		}
	}
	list := func(size int32, token string) func() error {
		return func() error {
			_, err := e.adm.ListPools(ctx, &tollgatev1.ListPoolsRequest{PageSize: size, PageToken: token})
			return err
		}
	}
	cases := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason apierr.Reason
		msg    string
	}{
		{"create no pool", create(nil), inv, ra, "pool is required"},
		{"create no name", create(&tollgatev1.Pool{ConcurrencyLimit: 1}), inv, ra, "pool.name is required"},
		{"create malformed name", create(&tollgatev1.Pool{Name: "a b", ConcurrencyLimit: 1}), inv, ra, "[A-Za-z0-9._:/-]"},
		{"create long name", create(&tollgatev1.Pool{Name: strings.Repeat("a", 129), ConcurrencyLimit: 1}), inv, ra, "128"},
		{"create no limits", create(&tollgatev1.Pool{Name: "x"}), inv, ra, "concurrency_limit"},
		{"create negative limit", create(&tollgatev1.Pool{Name: "x", ConcurrencyLimit: -1}), inv, ra, "concurrency_limit"},
		{"create bad rate", create(&tollgatev1.Pool{Name: "x", Rate: 2e9}), inv, ra, "rate"},
		{"create negative ttl", create(&tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1, DefaultLeaseTtl: dur(-time.Second)}), inv, ra, "default_lease_ttl"},
		{"create default above max", create(&tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1, DefaultLeaseTtl: dur(time.Hour)}), inv, ra, "default_lease_ttl"},
		{"create max ttl above 24h", create(&tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1, MaxLeaseTtl: dur(25 * time.Hour)}), inv, ra, "max_lease_ttl"},
		{"create exists", create(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1}), codes.AlreadyExists, apierr.ReasonPoolExists, "db"},
		{"get unknown", func() error { _, err := e.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: "nope"}); return err }, codes.NotFound, apierr.ReasonPoolNotFound, "nope"},
		{"get no name", func() error { _, err := e.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{}); return err }, inv, ra, "name is required"},
		{"get malformed", func() error { _, err := e.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: "a\x00b"}); return err }, inv, ra, "[A-Za-z0-9._:/-]"},
		{"delete unknown", func() error { _, err := e.adm.DeletePool(ctx, &tollgatev1.DeletePoolRequest{Name: "nope"}); return err }, codes.NotFound, apierr.ReasonPoolNotFound, "nope"},
		{"update no mask", update(&tollgatev1.Pool{Name: "db"}), inv, ra, "update_mask is required"},
		{"update empty mask", update(&tollgatev1.Pool{Name: "db"}, []string{}...), inv, ra, "update_mask is required"},
		{"update unknown path", update(&tollgatev1.Pool{Name: "db"}, "concurrency"), inv, ra, `"concurrency" is not a pool field`},
		{"update name path", update(&tollgatev1.Pool{Name: "db"}, "name"), inv, ra, "cannot be changed"},
		{"update no pool", update(nil, "rate"), inv, ra, "pool is required"},
		{"update unknown pool", update(&tollgatev1.Pool{Name: "nope", ConcurrencyLimit: 3}, "concurrency_limit"), codes.NotFound, apierr.ReasonPoolNotFound, "nope"},
		{"update bad value", update(&tollgatev1.Pool{Name: "db"}, "concurrency_limit"), inv, ra, "concurrency_limit"},
		{"update bad duration", update(&tollgatev1.Pool{Name: "db", MaxLeaseTtl: dur(-time.Second)}, "max_lease_ttl"), inv, ra, "max_lease_ttl"},
		{"list negative size", list(-1, ""), inv, ra, "page_size"},
		{"list bad token", list(0, "!!not-base64"), inv, ra, "page_token"},
		{"list token not a name", list(0, "IA"), inv, ra, "page_token"}, // base64url of " "
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := wantStatus(t, c.call(), c.code, c.reason)
			if !strings.Contains(st.Message(), c.msg) {
				t.Errorf("message %q does not mention %q", st.Message(), c.msg)
			}
		})
	}
	// The unknown-path message lists the valid paths.
	err := update(&tollgatev1.Pool{Name: "db"}, "bogus")()
	if st := wantStatus(t, err, inv, ra); !strings.Contains(st.Message(), strings.Join(poolconv.UpdatablePaths, ", ")) {
		t.Errorf("message %q does not list the valid paths", st.Message())
	}
	// Failed updates changed nothing.
	got, err := e.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: "db"})
	if err != nil || got.GetPool().GetConcurrencyLimit() != 1 {
		t.Fatalf("pool after failed updates = %v, %v", got, err)
	}
}

func TestListPoolsPaging(t *testing.T) {
	e := newEnv(t)
	var want []string
	for i := 24; i >= 0; i-- { // created out of order
		name := fmt.Sprintf("pool-%02d", i)
		e.createPool(&tollgatev1.Pool{Name: name, ConcurrencyLimit: int64(i + 1)})
	}
	for i := 0; i < 25; i++ {
		want = append(want, fmt.Sprintf("pool-%02d", i))
	}
	var got []string
	token := ""
	pages := 0
	for {
		resp, err := e.adm.ListPools(e.ctx(), &tollgatev1.ListPoolsRequest{PageSize: 10, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(resp.GetPools()) != len(resp.GetStatuses()) || len(resp.GetPools()) > 10 {
			t.Fatalf("page %d: %d pools, %d statuses", pages, len(resp.GetPools()), len(resp.GetStatuses()))
		}
		for _, p := range resp.GetPools() {
			got = append(got, p.GetName())
		}
		token = resp.GetNextPageToken()
		if token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if pages != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%d pages: %v", pages, got)
	}
	// page_size 0 means 100: one page; sizes above 1000 are capped, not refused.
	for _, size := range []int32{0, 5000} {
		resp, err := e.adm.ListPools(e.ctx(), &tollgatev1.ListPoolsRequest{PageSize: size})
		if err != nil || len(resp.GetPools()) != 25 || resp.GetNextPageToken() != "" {
			t.Fatalf("ListPools(size %d) = %d pools, token %q, %v", size, len(resp.GetPools()), resp.GetNextPageToken(), err)
		}
	}
}
