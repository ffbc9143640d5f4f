package limiter

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A missing pool's error names the pools whose names are close to it.
func TestPoolNotFoundSuggestsNearNames(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "orders-db", ConcurrencyLimit: 1})
	te.mustCreate(t, PoolConfig{Name: "billing", ConcurrencyLimit: 1})
	_, err := te.GetPool("order-db")
	if !errors.Is(err, apierr.ErrPoolNotFound) || !strings.Contains(err.Error(), `pool "order-db" not found (did you mean "orders-db"?); create it first`) {
		t.Fatalf("GetPool: %v", err)
	}
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "biling", Weight: 1})
	if !errors.Is(err, apierr.ErrPoolNotFound) || !strings.Contains(err.Error(), `did you mean "billing"?`) {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err = te.GetPool("zzz"); strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("GetPool of a name near nothing: %v", err)
	}
}

// Past nearMaxPools pools, no search is made.
func TestPoolNearIsBounded(t *testing.T) {
	var x poolIndex
	for i := range nearMaxPools + 1 {
		x.add(&pool{name: "p" + strconv.Itoa(i)})
	}
	if got := x.near("p1x"); got != nil {
		t.Fatalf("near searched %d pools: %q", nearMaxPools+1, got)
	}
}
