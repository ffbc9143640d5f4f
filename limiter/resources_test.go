package limiter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func ids(l Lease) string {
	var s []string
	for _, r := range l.Resources {
		s = append(s, r.ID)
	}
	return strings.Join(s, ",")
}

func res(names ...string) []Resource {
	out := make([]Resource, len(names))
	for i, n := range names {
		out[i] = Resource{ID: n, Attributes: map[string]string{"addr": n + ":5432"}}
	}
	return out
}

// TestActiveGrantBindsDistinctInstances: a grant of weight n is bound to n
// distinct instances with their attributes; a weight above the pool's
// instances is refused at once; a full pool queues and grants the freed
// instance.
func TestActiveGrantBindsDistinctInstances(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ResourceKind: ResourceActive})
	if _, err := te.AddResources("db", res("c1", "c2", "c3")); err != nil {
		t.Fatal(err)
	}
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	if len(a.Resources) != 2 || a.Resources[0].ID == a.Resources[1].ID || a.Resources[0].Attributes["addr"] != a.Resources[0].ID+":5432" {
		t.Fatalf("lease of weight 2 bound to %+v", a.Resources)
	}
	b := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	if strings.Contains(ids(a), ids(b)) {
		t.Fatalf("instance %s granted twice (a has %s)", ids(b), ids(a))
	}
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 4})
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	if !strings.Contains(err.Error(), "now (0 of 3 instances free, 0 waiting)") {
		t.Errorf("no-capacity message %q does not say the instances are taken, in a clean list", err)
	}
	w := te.startAcquire(t, AcquireRequest{Pool: "db"})
	if _, err := te.Release("db", b.FencingToken); err != nil {
		t.Fatal(err)
	}
	l, err := w.result(t)
	if err != nil || ids(l) != ids(b) {
		t.Fatalf("waiter got %q, %v; want the released %q", ids(l), err, ids(b))
	}
	if s := te.status(t, "db"); s.Resources != 3 || s.ResourcesFree != 0 || s.Held != 3 {
		t.Fatalf("status %+v", s)
	}
}

// TestSelectionPolicies: reuse grants the most recently released instance,
// spread the least recently used; the policy changes live.
func TestSelectionPolicies(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ResourceKind: ResourceActive})
	if _, err := te.AddResources("db", res("c1", "c2", "c3")); err != nil {
		t.Fatal(err)
	}
	// Use all three, releasing in the order c?, then see who comes first.
	var ls []Lease
	for range 3 {
		ls = append(ls, te.mustAcquire(t, AcquireRequest{Pool: "db"}))
	}
	for _, l := range ls {
		te.clk.Advance(time.Second)
		if _, err := te.Release("db", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	first, last := ids(ls[0]), ids(ls[2])
	reuse := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	if ids(reuse) != last {
		t.Fatalf("reuse granted %s; want the most recently released %s", ids(reuse), last)
	}
	if _, err := te.Release("db", reuse.FencingToken); err != nil {
		t.Fatal(err)
	}
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.Selection = SelectSpread }); err != nil {
		t.Fatal(err)
	}
	spread := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	if ids(spread) != first {
		t.Fatalf("spread granted %s; want the least recently used %s", ids(spread), first)
	}
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.ResourceKind = ResourceFree; c.ConcurrencyLimit = 3 }); err == nil {
		t.Fatal("an active pool became free")
	}
}

// TestRemoveResources: removing a held instance revokes its lease with the
// reason (its other instances come back), or with wait lets it run and
// takes the instance away when it ends; waiters that can no longer fit
// fail.
func TestRemoveResources(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ResourceKind: ResourceActive, Selection: SelectSpread})
	if _, err := te.AddResources("db", res("c1", "c2", "c3", "c4")); err != nil {
		t.Fatal(err)
	}
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2}) // c1? (spread: front first)
	b := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	big := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 4})

	r, err := te.RemoveResources("db", []string{a.Resources[0].ID}, false, "the replica is being rebuilt")
	if err != nil || r.Removed != 1 || r.Revoked != 1 {
		t.Fatalf("RemoveResources = %+v, %v", r, err)
	}
	if _, err := big.result(t); err == nil || !strings.Contains(err.Error(), "can no longer grant weight 4") {
		t.Fatalf("the waiter of weight 4 in a pool of 3: %v", err)
	}
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Lease.FencingToken != a.FencingToken || ended[0].Reason != EndRevoked || !strings.Contains(ended[0].Message, "the replica is being rebuilt") {
		t.Fatalf("ended %+v", ended)
	}
	_, err = te.Renew("db", a.FencingToken, 0, nil)
	wantReason(t, err, apierr.ErrLeaseRevoked)
	if s := te.status(t, "db"); s.Resources != 3 || s.ResourcesFree != 2 || s.Held != 1 {
		t.Fatalf("after removing a held instance: %+v", s)
	}

	r, err = te.RemoveResources("db", []string{b.Resources[0].ID}, true, "")
	if err != nil || r.Removing != 1 || r.Revoked != 0 {
		t.Fatalf("RemoveResources(wait) = %+v, %v", r, err)
	}
	if _, err := te.Renew("db", b.FencingToken, 0, nil); err != nil {
		t.Fatalf("a lease whose instance is removed with wait must run on: %v", err)
	}
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 3})
	wantReason(t, err, apierr.ErrInvalidArgument) // 2 usable instances
	if _, err := te.Release("db", b.FencingToken); err != nil {
		t.Fatal(err)
	}
	states, _, err := te.ListResources("db")
	if err != nil || len(states) != 2 {
		t.Fatalf("ListResources = %+v, %v", states, err)
	}
	for _, s := range states {
		if s.ID == a.Resources[0].ID || s.ID == b.Resources[0].ID || s.Holder != 0 || s.Removing {
			t.Fatalf("left %+v", states)
		}
	}

	// Bad input.
	_, err = te.RemoveResources("db", []string{"c9"}, false, "")
	wantReason(t, err, apierr.ErrResourceNotFound)
	_, err = te.RemoveResources("db", nil, false, "")
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.AddResources("db", res(states[0].ID))
	wantReason(t, err, apierr.ErrResourceExists)
	_, err = te.AddResources("db", []Resource{{ID: "bad id"}})
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.AddResources("db", []Resource{{ID: "x", Attributes: map[string]string{"": "v"}}})
	wantReason(t, err, apierr.ErrInvalidArgument)
	te.mustCreate(t, PoolConfig{Name: "free", ConcurrencyLimit: 1})
	_, err = te.AddResources("free", res("x"))
	wantReason(t, err, apierr.ErrNotActive)
	_, _, err = te.ListResources("free")
	wantReason(t, err, apierr.ErrNotResourcePool)
	_, err = te.RegisterProvider("db", ProviderSpec{ID: "w1"}, nil)
	wantReason(t, err, apierr.ErrNotPassive)
}

// TestProviderMissesKeepAlive: a provider's instances are the passive
// pool's capacity; when it misses its keep-alive they leave, the leases on
// them are revoked with a reason naming the provider, and waiters stay
// queued for the next provider.
func TestProviderMissesKeepAlive(t *testing.T) {
	te := newTestEngine(t)
	var events []PoolEvent
	te.Engine.onPoolEvent = func(ev PoolEvent) { te.mu.Lock(); events = append(events, ev); te.mu.Unlock() }
	te.mustCreate(t, PoolConfig{Name: "gpu", ResourceKind: ResourcePassive})
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "gpu", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)

	h, err := te.RegisterProvider("gpu", ProviderSpec{ID: "worker-1", TTL: 3 * time.Second, Address: "10.0.0.7:1234"}, res("slot-1", "slot-2"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = te.RegisterProvider("gpu", ProviderSpec{ID: "worker-1"}, nil)
	wantReason(t, err, apierr.ErrProviderExists)
	l := te.mustAcquire(t, AcquireRequest{Pool: "gpu", TTL: time.Minute})
	if len(l.Resources) != 1 || l.Resources[0].Provider != "worker-1" {
		t.Fatalf("lease bound to %+v", l.Resources)
	}
	te.clk.Advance(2 * time.Second)
	if _, err := h.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	te.clk.Advance(2 * time.Second) // 4s after registering, 2s after the keep-alive
	if s := te.status(t, "gpu"); s.Providers != 1 || s.Resources != 2 {
		t.Fatalf("a provider kept alive left: %+v", s)
	}
	w := te.startAcquire(t, AcquireRequest{Pool: "gpu", Weight: 2})
	te.clk.Advance(time.Second) // 3s after the keep-alive: gone
	if s := te.status(t, "gpu"); s.Providers != 0 || s.Resources != 0 || s.Held != 0 || s.Revoked != 1 || s.Waiting != 1 {
		t.Fatalf("after the provider missed its keep-alive: %+v", s)
	}
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Reason != EndRevoked || !strings.Contains(ended[0].Message, `provider "worker-1"`) || !strings.Contains(ended[0].Message, "keep-alive") {
		t.Fatalf("ended %+v", ended)
	}
	_, err = h.Offer(res("slot-3"))
	wantReason(t, err, apierr.ErrProviderNotFound)
	if !strings.Contains(err.Error(), "missed its keep-alive") {
		t.Errorf("a late offer's error %q does not say why the provider is gone", err)
	}
	te.mu.Lock()
	types := []PoolEventType{}
	for _, ev := range events {
		types = append(types, ev.Type)
	}
	te.mu.Unlock()
	if len(types) != 2 || types[0] != ProviderJoined || types[1] != ProviderLeft {
		t.Fatalf("events %v; want joined, left", types)
	}

	// Another provider comes: the waiter is granted its two slots.
	h2, err := te.RegisterProvider("gpu", ProviderSpec{ID: "worker-2"}, res("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Offer(res("b")); err != nil {
		t.Fatal(err)
	}
	got, err := w.result(t)
	if err != nil || ids(got) == "" || len(got.Resources) != 2 {
		t.Fatalf("waiter: %+v, %v", got, err)
	}
	// Withdrawing one revokes the lease; leaving takes the rest.
	r, _, err := h2.Withdraw([]string{"a"}, false)
	if err != nil || r.Revoked != 1 {
		t.Fatalf("Withdraw = %+v, %v", r, err)
	}
	_, _, err = h2.Withdraw([]string{"c"}, false)
	wantReason(t, err, apierr.ErrResourceNotFound)
	if err := h2.Leave("shutting down"); err != nil {
		t.Fatal(err)
	}
	wantReason(t, h2.Leave("again"), apierr.ErrProviderNotFound)
	if s := te.status(t, "gpu"); s.Resources != 0 || s.Providers != 0 {
		t.Fatalf("after leaving: %+v", s)
	}
}

// TestActiveResourcesSurviveRestart: an active pool's instances are
// durable; after a restart, a holder renewing with its instance ids gets
// them back, and one naming an instance that was removed does not.
func TestActiveResourcesSurviveRestart(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ResourceKind: ResourceActive, Selection: SelectSpread}) // grants c1, c2 first
	if _, err := te.AddResources("db", res("c1", "c2", "c3")); err != nil {
		t.Fatal(err)
	}
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, TTL: 10 * time.Second})
	if _, err := te.RemoveResources("db", []string{"c3"}, false, ""); err != nil {
		t.Fatal(err)
	}
	te2 := te.restart(t, m, time.Second)
	states, _, err := te2.ListResources("db")
	if err != nil || len(states) != 2 || states[0].ID != "c1" || states[1].Attributes["addr"] != "c2:5432" {
		t.Fatalf("after a restart: %+v, %v", states, err)
	}
	_, err = te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrRecovering)
	ra := Readopt{Weight: 2, Resources: []string{"c1", "c9"}, Receipt: Receipt{Expiry: liveReceipt, Weight: 2}}
	_, err = te2.RenewOrReadopt("db", a.FencingToken, 0, nil, ra)
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	ra.Resources = []string{a.Resources[0].ID, a.Resources[1].ID}
	l, err := te2.RenewOrReadopt("db", a.FencingToken, 0, nil, ra)
	if err != nil || ids(l) != ids(a) {
		t.Fatalf("re-adopted %q, %v; want %q", ids(l), err, ids(a))
	}
	if s := te2.status(t, "db"); s.ResourcesFree != 0 || s.Held != 2 {
		t.Fatalf("after re-adoption: %+v", s)
	}
}

// TestResourcePoolUtilisation: an active pool without a concurrency limit
// is as full as its instances are held, in its status and its stats.
func TestResourcePoolUtilisation(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ResourceKind: ResourceActive})
	if _, err := te.AddResources("db", res("c1", "c2", "c3", "c4")); err != nil {
		t.Fatal(err)
	}
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3})
	st, err := te.PoolStats("db")
	if err != nil || st.Status.Utilisation != 0.75 || st.Utilisation != 0.75 {
		t.Fatalf("PoolStats = %+v, %v; want utilisation 0.75", st, err)
	}
}

// TestPassiveLeaseSurvivesRestart: after a restart, a holder of a passive
// instance that renews before the instance's provider has registered
// again keeps its lease: the instance is held for it, and handed to the
// provider when it offers it again. A lease whose provider never comes
// back is revoked when the recovery window ends.
func TestPassiveLeaseSurvivesRestart(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "gpu", ResourceKind: ResourcePassive, DefaultLeaseTTL: 10 * time.Second})
	if _, err := te.RegisterProvider("gpu", ProviderSpec{ID: "w1"}, res("a", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := te.RegisterProvider("gpu", ProviderSpec{ID: "w2"}, res("z")); err != nil {
		t.Fatal(err)
	}
	la := te.mustAcquire(t, AcquireRequest{Pool: "gpu"})
	lz := te.mustAcquire(t, AcquireRequest{Pool: "gpu", Weight: 2}) // z and one of w1's

	te2 := te.restart(t, m, time.Second)
	if _, err := te2.RenewOrReadopt("gpu", la.FencingToken, 0, nil, Readopt{Weight: 1, Resources: []string{la.Resources[0].ID}, Receipt: Receipt{Expiry: liveReceipt, Weight: 1}}); err != nil {
		t.Fatalf("re-adopting a lease whose provider has not come back yet: %v", err)
	}
	ids := []string{lz.Resources[0].ID, lz.Resources[1].ID}
	if _, err := te2.RenewOrReadopt("gpu", lz.FencingToken, 0, nil, Readopt{Weight: 2, Resources: ids, Receipt: Receipt{Expiry: liveReceipt, Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	if s := te2.status(t, "gpu"); s.Held != 3 || s.Resources != 3 || s.ResourcesFree != 0 {
		t.Fatalf("after the re-adoptions: %+v", s)
	}
	if err := te2.checkInvariants(map[string]int64{}); err != nil {
		t.Fatal(err)
	}
	// w1 comes back with a and b: the held one is handed over, held.
	if _, err := te2.RegisterProvider("gpu", ProviderSpec{ID: "w1", TTL: time.Minute}, res("a", "b")); err != nil {
		t.Fatalf("w1 offering its instances again: %v", err)
	}
	states, _, _ := te2.ListResources("gpu")
	for _, s := range states {
		if (s.ID == "a" || s.ID == "b") && s.Provider != "w1" {
			t.Fatalf("instance %s not handed to w1: %+v", s.ID, states)
		}
	}
	if s := te2.status(t, "gpu"); s.Held != 3 || s.Resources != 3 || s.ResourcesFree != 0 {
		t.Fatalf("after w1 is back: %+v", s)
	}
	if err := te2.checkInvariants(map[string]int64{}); err != nil {
		t.Fatal(err)
	}
	// w2 never comes back: lz is revoked when the window ends; la stays.
	te2.clk.Advance(8 * time.Second)
	if _, err := te2.Renew("gpu", la.FencingToken, 0, nil); err != nil {
		t.Fatal(err)
	}
	te2.clk.Advance(8 * time.Second) // past the window (the 10s TTL in use)
	if _, err := te2.Renew("gpu", la.FencingToken, 0, nil); err != nil {
		t.Fatalf("the lease whose provider came back: %v", err)
	}
	found := false
	for _, le := range te2.endedLeases() {
		if le.Lease.FencingToken == lz.FencingToken && le.Reason == EndRevoked && strings.Contains(le.Message, "recovery window") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the lease on w2's instance was not revoked at the window's end: %+v", te2.endedLeases())
	}
	if s := te2.status(t, "gpu"); s.Resources != 2 || s.Held != 1 || s.ResourcesFree != 1 {
		t.Fatalf("after the window: %+v (want w1's a and b, one held)", s)
	}
	if err := te2.checkInvariants(map[string]int64{}); err != nil {
		t.Fatal(err)
	}
}

// TestResourcePoolNearFull: the near-full mark of an active pool without
// a concurrency limit is a fraction of its instances, and adding
// instances re-arms it.
func TestResourcePoolNearFull(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ResourceKind: ResourceActive, NearFullMark: 0.75, LowUtilisationMark: MarkOff})
	if _, err := ee.AddResources("db", res("c1", "c2", "c3", "c4")); err != nil {
		t.Fatal(err)
	}
	nearFull := func() int {
		n := 0
		for _, ev := range ee.takeEvents() {
			if ev.Type == PoolNearFull {
				n++
			}
		}
		return n
	}
	for range 2 {
		ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	}
	if n := nearFull(); n != 0 {
		t.Fatalf("%d near-full events at 2 of 4 instances", n)
	}
	ee.mustAcquire(t, AcquireRequest{Pool: "db"}) // 3 of 4: 75%
	if n := nearFull(); n != 1 {
		t.Fatalf("%d near-full events at 3 of 4 instances; want 1", n)
	}
	if _, err := ee.AddResources("db", res("c5", "c6", "c7", "c8")); err != nil { // 3 of 8: re-armed
		t.Fatal(err)
	}
	ee.clk.Advance(DefaultMarkEventInterval)
	for range 3 {
		ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	}
	if n := nearFull(); n != 1 {
		t.Fatalf("%d near-full events at 6 of 8 instances; want 1 more", n)
	}
}

// TestNearFullAfterAnAdaptiveCut: a cut of the effective limit crosses
// the near-full mark at once, without waiting for the next grant or
// release.
func TestNearFullAfterAnAdaptiveCut(t *testing.T) {
	ee := newEventEngine(t)
	cfg := adaptiveConc
	cfg.NearFullMark = 0.85
	ee.mustCreate(t, cfg) // limit 10
	for range 8 {         // 80%
		ee.mustAcquire(t, AcquireRequest{Pool: "db"})
	}
	ee.takeEvents()
	ee.report(t, "db", OutcomeError, 20)
	if l, _ := ee.effective(t, "db"); l != 9 { // 8 of 9: 89%
		t.Fatalf("effective limit %d after the errors; want 9", l)
	}
	found := false
	for _, ev := range ee.takeEvents() {
		found = found || ev.Type == PoolNearFull
	}
	if !found {
		t.Fatal("no near-full event when the limit was cut under the mark")
	}
}
