package limiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// newTestResourceSet returns a set of n instances i0..i(n-1), added at
// now, i0 granted first under SelectSpread.
func newTestResourceSet(n int, now time.Time) *resourceSet {
	rs := newResourceSet()
	add := make([]Resource, n)
	for i := range add {
		add[i] = Resource{ID: fmt.Sprintf("i%d", i)}
	}
	rs.addAll(add, now)
	return rs
}

func resourceIDs(rs []Resource) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

// TestResourceSetBinds: the set admits a weight only if as many instances
// are free, binds them by the selection policy, and takes them back as
// the lease ends, most recently released last in the free list.
func TestResourceSetBinds(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	rs := newTestResourceSet(3, now)
	if !rs.admits(0, 3, now) || rs.admits(0, 4, now) {
		t.Fatal("admits: 3 free instances")
	}
	a := &lease{Lease: Lease{FencingToken: 1, Weight: 2}}
	rs.bind(a, SelectSpread)
	if got := resourceIDs(a.Resources); !slices.Equal(got, []string{"i0", "i1"}) {
		t.Fatalf("spread binds %v, want the least recently used i0, i1", got)
	}
	if rs.admits(0, 2, now) || rs.describe(0, now) != "1 of 3 instances free" {
		t.Fatalf("after binding 2: %q", rs.describe(0, now))
	}
	rs.unbind(a, now.Add(time.Second))
	b := &lease{Lease: Lease{FencingToken: 2, Weight: 1}}
	rs.bind(b, SelectReuse)
	if got := resourceIDs(b.Resources); !slices.Equal(got, []string{"i1"}) {
		t.Fatalf("reuse binds %v, want the most recently released i1", got)
	}
	if ins := rs.instancesOf(b); len(ins) != 1 || ins[0].holder != b {
		t.Fatalf("instancesOf: %v", ins)
	}
	var s PoolStatus
	rs.status(&s, now)
	if s.Resources != 3 || s.ResourcesFree != 2 || s.Providers != 0 {
		t.Fatalf("status: %+v", s)
	}
}

// TestResourceSetRemoves: a free instance leaves at once; a held one is
// marked removing, is not recorded, and leaves when its lease lets it go.
func TestResourceSetRemoves(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	rs := newTestResourceSet(3, now)
	l := &lease{Lease: Lease{FencingToken: 1, Weight: 1}}
	rs.bind(l, SelectSpread) // i0
	removed, holders := rs.remove([]*instance{rs.byID["i0"], rs.byID["i2"]})
	if removed != 1 || len(holders) != 1 || holders[0] != l {
		t.Fatalf("remove: %d removed, holders %v", removed, holders)
	}
	if got := rs.removingOf(l); !slices.Equal(got, []string{`"i0"`}) {
		t.Fatalf("removingOf: %v", got)
	}
	if rs.usable() != 1 {
		t.Fatalf("usable: %d, want 1 (i1)", rs.usable())
	}
	if got := resourceIDs(rs.recorded([]Resource{{ID: "a"}}, []string{"i1"})); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("recorded: %v, want a (i0 is being removed, i1 removed, i2 gone)", got)
	}
	rs.unbind(l, now)
	if _, ok := rs.byID["i0"]; ok || rs.removing != 0 {
		t.Fatal("a removing instance stayed after its lease let it go")
	}
}

// TestResourceSetChecks: new instances must have new ids and fit under
// MaxResourcesPerPool; looked-up ones must be there, and offered by the
// provider named.
func TestResourceSetChecks(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	rs := newTestResourceSet(2, now)
	if err := rs.checkNew("p", []Resource{{ID: "i1"}}); !errors.Is(err, apierr.ErrResourceExists) {
		t.Fatalf("checkNew of a taken id: %v", err)
	}
	if err := rs.checkNew("p", make([]Resource, MaxResourcesPerPool-1)); !errors.Is(err, apierr.ErrTooManyResources) {
		t.Fatalf("checkNew past the most: %v", err)
	}
	if err := rs.checkNew("p", []Resource{{ID: "new"}}); err != nil {
		t.Fatal(err)
	}
	if ins, err := rs.lookup("p", []string{"i0"}, ""); err != nil || len(ins) != 1 {
		t.Fatalf("lookup: %v %v", ins, err)
	}
	if _, err := rs.lookup("p", []string{"i0"}, "prov"); !errors.Is(err, apierr.ErrResourceNotFound) || !strings.Contains(err.Error(), "provider") {
		t.Fatalf("lookup of another provider's: %v", err)
	}
	if err := checkKind("p", ResourceFree, ResourcePassive, "x"); !errors.Is(err, apierr.ErrNotPassive) {
		t.Fatalf("checkKind: %v", err)
	}
	if err := checkKind("p", ResourceActive, ResourceActive, "x"); err != nil {
		t.Fatal(err)
	}
}

// TestResourceSetReadopts: a re-adoption names exactly its weight of
// distinct free instances; in a passive pool an instance not offered
// again yet is held for the lease, awaited, until its provider offers it.
func TestResourceSetReadopts(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	rs := newTestResourceSet(2, now)
	for _, c := range []struct {
		ids  []string
		says string
	}{
		{[]string{"i0"}, "names 1 instances for weight 2"},
		{[]string{"i0", "i0"}, "twice"},
		{[]string{"i0", "gone"}, "is not in the pool"},
	} {
		_, err := rs.readoptInstances("p", false, 7, &Readopt{Weight: 2, Resources: c.ids}, "", now)
		if !errors.Is(err, apierr.ErrLeaseNotReadopted) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want %q", c.ids, err, c.says)
		}
	}
	ins, err := rs.readoptInstances("p", true, 7, &Readopt{Weight: 2, Resources: []string{"i0", "later"}}, "", now)
	if err != nil || len(ins) != 2 || !ins[1].awaited {
		t.Fatalf("passive re-adoption: %v %v", ins, err)
	}
	l := &lease{Lease: Lease{FencingToken: 7, Weight: 2}}
	rs.bindTo(l, ins)
	if _, err := rs.readoptInstances("p", false, 8, &Readopt{Weight: 1, Resources: []string{"i0"}}, "", now); err == nil || !strings.Contains(err.Error(), "held by another lease") {
		t.Fatalf("re-adoption on a held instance: %v", err)
	}
	if got := rs.awaitedHolders(); len(got) != 1 || got[0] != l {
		t.Fatalf("awaitedHolders: %v", got)
	}
	pr := &provider{ProviderSpec: ProviderSpec{ID: "prov"}, res: make(map[string]*instance)}
	rs.providers["prov"] = pr
	if !rs.offer(pr, []Resource{{ID: "later", Provider: "prov"}, {ID: "fresh", Provider: "prov"}}, now) {
		t.Fatal("offer of two instances: false")
	}
	if in := rs.byID["later"]; in.awaited || in.holder != l || pr.res["later"] != in {
		t.Fatal("the awaited instance was not handed over to its provider, held")
	}
	if len(rs.awaitedHolders()) != 0 || rs.free.Len() != 2 {
		t.Fatalf("after the offer: %d awaited holders, %d free", len(rs.awaitedHolders()), rs.free.Len())
	}
	if infos := rs.providerInfos(); len(infos) != 1 || infos[0].Resources != 2 {
		t.Fatalf("providerInfos: %+v", infos)
	}
	pr.handle = &Provider{id: "prov"}
	if evs := rs.providersGone("p", now); len(evs) != 1 || evs[0].Type != ProviderLeft || pr.handle.gone == "" {
		t.Fatalf("providersGone: %+v", evs)
	}
}
