package server

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server/store"
)

// TestManyPoolsRestoreAndList: a data directory of 100,000 pools (written
// through the store, in one transaction) restores at start-up without a
// write; the engine lists them all a page at a time, in name order; the
// API's pages (ListPools, GetStats) start and continue anywhere; and the
// pools serve.
func TestManyPoolsRestoreAndList(t *testing.T) {
	const n = 100_000
	name := func(i int) string { return fmt.Sprintf("pool-%06d", i) }
	d := newDurableEnv(t)
	st, err := store.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	seed := make([]limiter.SavedPool, n)
	for i := range seed {
		if seed[i], err = limiter.NewSavedPool(limiter.PoolConfig{Name: name(i), ConcurrencyLimit: 4}, testStart); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.LoadOrSeed(seed); err != nil {
		t.Fatal(err)
	}
	st.Close()

	d.start(nil)
	if c := d.srv.store.(*store.Store).Commits(); c != 0 {
		t.Fatalf("restoring %d pools made %d transactions, want none", n, c)
	}
	listed, after := 0, ""
	for {
		infos, more := d.srv.Engine().ListPools(after, MaxPageSize)
		for i, info := range infos {
			if info.Config.Name != name(listed+i) {
				t.Fatalf("listed %q at %d, want %q", info.Config.Name, listed+i, name(listed+i))
			}
		}
		listed += len(infos)
		if !more {
			break
		}
		after = infos[len(infos)-1].Config.Name
	}
	if listed != n {
		t.Fatalf("listed %d pools, want %d", listed, n)
	}
	for _, from := range []int{-1, n / 2, n - 11} {
		token := ""
		if from >= 0 {
			token = pagetoken.Encode(name(from))
		}
		const page = 100
		want := min(page, n-from-1)
		pools, err := d.adm.ListPools(d.ctx(), &tollgatev1.ListPoolsRequest{PageSize: page, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		stats, err := d.adm.GetStats(d.ctx(), &tollgatev1.GetStatsRequest{PageSize: page, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(pools.GetPools()) != want || pools.GetPools()[0].GetName() != name(from+1) || len(stats.GetStats()) != want ||
			(pools.GetNextPageToken() == "") != (from+1+want == n) {
			t.Fatalf("the page after pool %d: %d pools from %q, %d statistics, next page %q; want %d from %q",
				from, len(pools.GetPools()), pools.GetPools()[0].GetName(), len(stats.GetStats()), pools.GetNextPageToken(), want, name(from+1))
		}
	}
	resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: name(n - 1)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetLease().GetFencingToken() == 0 {
		t.Fatalf("a grant in the last pool: %v", resp)
	}
}
