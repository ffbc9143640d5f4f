package server

import (
	"encoding/json"
	"testing"

	"github.com/tollgate/tollgate/internal/httpapi"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// /api/pools carries what the status page shows beyond held and waiting:
// suspension, revocations and rate shares.
func TestHTTPPoolsSuspendedRevokedShares(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4})
	e.createPool(&tollgatev1.Pool{Name: "feed", Rate: 100})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	if _, err := e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{Name: "db"}); err != nil {
		t.Fatal(err)
	}
	s := e.session()
	s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_AcquireShare{AcquireShare: &tollgatev1.AcquireShareRequest{Pool: "feed", Want: 30}}})

	code, body := o.get(nil, "/api/pools")
	if code != 200 {
		t.Fatalf("GET /api/pools = %d %s", code, body)
	}
	var pools httpapi.PoolsResponse
	if err := json.Unmarshal([]byte(body), &pools); err != nil {
		t.Fatal(err)
	}
	if len(pools.Pools) != 2 {
		t.Fatalf("pools = %+v", pools)
	}
	db, feed := pools.Pools[0].Status, pools.Pools[1].Status
	if !db.Suspended || db.Revoked != 1 || db.ThrottleReason != "" {
		t.Errorf("db status = %+v; want suspended with 1 revoked", db)
	}
	if feed.Suspended || feed.Revoked != 0 || feed.ShareHolders != 1 || feed.SharesGranted != 30 {
		t.Errorf("feed status = %+v; want 1 share holder granted 30/s", feed)
	}
}

// /api/pools/{name}/leases lists who holds what, a page at a time, and
// says why it cannot.
func TestHTTPPoolLeases(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2), ClientId: "a", Description: "nightly"})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "b"})

	var page httpapi.LeasesResponse
	code, body := o.get(nil, "/api/pools/db/leases?limit=1")
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
		t.Fatalf("GET leases = %d %s", code, body)
	}
	if !page.More || len(page.Leases) != 1 || page.Leases[0].ID != "1" || page.Leases[0].ClientID != "a" ||
		page.Leases[0].Weight != 2 || page.Leases[0].Description != "nightly" {
		t.Fatalf("first page = %s", body)
	}
	code, body = o.get(nil, "/api/pools/db/leases?after=1")
	page = httpapi.LeasesResponse{}
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil || page.More || len(page.Leases) != 1 ||
		page.Leases[0].ID != "2" || page.Leases[0].ClientID != "b" {
		t.Fatalf("second page = %d %s", code, body)
	}
	for path, want := range map[string]int{
		"/api/pools/nope/leases":        404,
		"/api/pools/db/leases?after=x":  400,
		"/api/pools/db/leases?limit=0":  400,
		"/api/pools/db/leases?limit=-3": 400,
	} {
		if code, body := o.get(nil, path); code != want {
			t.Errorf("GET %s = %d %s; want %d", path, code, body, want)
		}
	}
}
