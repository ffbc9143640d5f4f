package limiter

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Holdings sums leases and shares per owner, client id and pool, in pool
// order, and follows an owner change made by a renew.
func TestHoldings(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 100})
	a, b := new(int), new(int) // owners: distinct pointers
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, Owner: a, ClientID: "alpha"})
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3, Owner: a, ClientID: "alpha"})
	moved := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, Owner: a, ClientID: "alpha"})
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 4, ClientID: "unary"})
	if _, err := te.AcquireShare(ShareRequest{Pool: "api", Want: 30, Owner: b, ClientID: "beta"}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Renew("db", moved.FencingToken, 0, b); err != nil {
		t.Fatal(err)
	}

	got, err := te.Holdings("")
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]Holding{}
	var pools []string
	for _, h := range got {
		owner := map[any]string{a: "a", b: "b", nil: "-"}[h.Owner]
		byKey[h.Pool+"/"+owner+"/"+h.ClientID] = h
		pools = append(pools, h.Pool)
	}
	want := map[string]Holding{
		"api/b/beta": {Pool: "api", Owner: b, ClientID: "beta", Shares: 1, ShareRate: 30},
		"db/a/alpha": {Pool: "db", Owner: a, ClientID: "alpha", Leases: 2, Weight: 5},
		"db/b/alpha": {Pool: "db", Owner: b, ClientID: "alpha", Leases: 1, Weight: 1},
		"db/-/unary": {Pool: "db", ClientID: "unary", Leases: 1, Weight: 4},
	}
	if !reflect.DeepEqual(byKey, want) {
		t.Errorf("Holdings = %+v\nwant %+v", byKey, want)
	}
	if strings.Join(pools, " ") != "api db db db" {
		t.Errorf("pools in order %v, want api first", pools)
	}

	only, err := te.Holdings("api")
	if err != nil || len(only) != 1 || only[0].Pool != "api" {
		t.Errorf("Holdings(api) = %+v, %v", only, err)
	}
	if _, err := te.Holdings("nope"); !errors.Is(err, apierr.ErrPoolNotFound) {
		t.Errorf("Holdings(nope) error = %v, want apierr.ErrPoolNotFound", err)
	}
}
