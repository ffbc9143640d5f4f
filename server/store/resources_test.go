package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An active pool's instances come back after a reopen; record writes that
// leave them as they were do not write them again; removing them all
// removes them; deleting the pool forgets them.
func TestResourcesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		t.Fatal(err)
	}
	sp, err := limiter.NewSavedPool(limiter.PoolConfig{Name: "db", ResourceKind: limiter.ResourceActive}, t0)
	if err != nil {
		t.Fatal(err)
	}
	sp.Resources = []limiter.Resource{{ID: "c1", Attributes: map[string]string{"addr": "db-1:5432"}}, {ID: "c2"}}
	for i := range 3 { // three record writes (reservations), one instance write
		sp.State.TokenCeiling = uint64(1024 * (i + 1))
		if err := s.SavePool(sp); err != nil {
			t.Fatal(err)
		}
	}
	if s.res.writes != 1 {
		t.Fatalf("%d instance writes for 3 record writes with the same instances; want 1", s.res.writes)
	}
	s.Close()

	s = mustOpen(t, dir)
	got := load(t, s)["db"]
	if !reflect.DeepEqual(got.Resources, sp.Resources) || got.State.TokenCeiling != 3072 {
		t.Fatalf("after a reopen: %+v", got)
	}
	sp.State.TokenCeiling = 4096
	if err := s.SavePool(sp); err != nil {
		t.Fatal(err)
	}
	if s.res.writes != 0 {
		t.Fatalf("the first record write after a reopen rewrote the unchanged instances")
	}
	sp.Resources = sp.Resources[:1]
	if err := s.SavePool(sp); err != nil {
		t.Fatal(err)
	}
	sp.Resources = nil
	if err := s.SavePool(sp); err != nil {
		t.Fatal(err)
	}
	if s.res.writes != 2 {
		t.Fatalf("%d instance writes for 2 changes", s.res.writes)
	}
	if got := load(t, s)["db"]; got.Resources != nil {
		t.Fatalf("instances after removing them all: %+v", got.Resources)
	}
	sp.Resources = []limiter.Resource{{ID: "c9"}}
	if err := s.SavePool(sp); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePool("db", 4096); err != nil {
		t.Fatal(err)
	}
	sp.Resources = nil
	sp.State.LeaseHorizon = t0.Add(time.Hour)
	if err := s.SavePool(sp); err != nil { // the pool again, under the same name
		t.Fatal(err)
	}
	if got := load(t, s)["db"]; got.Resources != nil {
		t.Fatalf("a deleted pool's instances came back: %+v", got.Resources)
	}
}
