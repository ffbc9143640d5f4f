package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// refFair is a plain reference of weighted max-min fairness: raise a
// common level until every share has its want or the capacity is used.
func refFair(wants, weights []float64, capacity float64) []float64 {
	out := make([]float64, len(wants))
	active := make([]int, len(wants))
	for i := range active {
		active[i] = i
	}
	left := capacity
	for len(active) > 0 && left > 1e-12 {
		var wsum float64
		for _, i := range active {
			wsum += weights[i]
		}
		level := left / wsum
		var next []int
		for _, i := range active {
			if wants[i]-out[i] <= level*weights[i] {
				left -= wants[i] - out[i]
				out[i] = wants[i]
			} else {
				next = append(next, i)
			}
		}
		if len(next) == len(active) { // nobody satisfied: all at the level
			for _, i := range active {
				out[i] += level * weights[i]
			}
			break
		}
		active = next
	}
	return out
}

func TestFairTargets(t *testing.T) {
	for _, tc := range []struct {
		wants, weights []float64
		capacity       float64
		want           []float64
	}{
		{[]float64{100, 200, 300}, []float64{1, 1, 1}, 300, []float64{100, 100, 100}},
		{[]float64{50, 200, 300}, []float64{1, 1, 1}, 300, []float64{50, 125, 125}},
		{[]float64{50, 60, 70}, []float64{1, 1, 1}, 300, []float64{50, 60, 70}},
		{[]float64{300, 300}, []float64{1, 2}, 300, []float64{100, 200}},
		{[]float64{50, 300, 300}, []float64{3, 1, 2}, 300, []float64{50, 250.0 / 3, 500.0 / 3}},
	} {
		var shares []*share
		for i := range tc.wants {
			shares = append(shares, &share{want: toShareUnits(tc.wants[i]), weight: int64(tc.weights[i])})
		}
		fairTargets(shares, toShareUnits(tc.capacity), nil)
		ref := refFair(tc.wants, tc.weights, tc.capacity)
		var sum int64
		for i, s := range shares {
			sum += s.target
			if got := fromShareUnits(s.target); math.Abs(got-tc.want[i]) > 1e-5 || math.Abs(ref[i]-tc.want[i]) > 1e-9 {
				t.Errorf("wants %v weights %v capacity %v: share %d gets %v (reference %v), want %v", tc.wants, tc.weights, tc.capacity, i, got, ref[i], tc.want[i])
			}
		}
		if sum > toShareUnits(tc.capacity) {
			t.Errorf("targets sum %d above capacity", sum)
		}
	}
}

// shareSim drives the share holders of one pool step by step on a fake
// clock: each refreshes at its refresh interval (holders are refreshed in
// a random order within a step) and applies the updates pushed to it, and
// the sum of granted shares is checked after every step.
type shareSim struct {
	t      *testing.T
	ee     *eventEngine
	pool   string
	rng    *rand.Rand
	held   map[uint64]*simHolder
	order  []uint64
	prev   map[string]int64
	silent map[uint64]bool // holders that stopped refreshing
}

type simHolder struct {
	share   Share
	next    time.Time // next refresh
	weights float64
}

func newShareSim(t *testing.T, rate float64, seed uint64) *shareSim {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "api", Rate: rate, Burst: int64(rate), SafeRate: 1})
	return &shareSim{t: t, ee: ee, pool: "api", rng: rand.New(rand.NewPCG(seed, 1)), held: map[uint64]*simHolder{},
		prev: map[string]int64{}, silent: map[uint64]bool{}}
}

// check asserts the sum of granted shares, from the engine's own view and
// as the holders know them, is within the effective rate.
func (s *shareSim) check(when string) {
	s.t.Helper()
	s.ee.checkAll(s.t, s.prev) // the table's sum (checkAdaptiveLocked)
	shares, err := s.ee.Shares(s.pool)
	if err != nil {
		s.t.Fatal(err)
	}
	_, rate := s.ee.effective(s.t, s.pool)
	var engineSum, holderSum float64
	for _, sh := range shares {
		engineSum += sh.Rate
	}
	for _, h := range s.held {
		holderSum += h.share.Rate
	}
	if engineSum > rate*(1+1e-12) || holderSum > rate*(1+1e-12) {
		s.t.Fatalf("%s: shares sum to %v (engine) / %v (holders), above the rate %v", when, engineSum, holderSum, rate)
	}
}

// join acquires a share for a new holder.
func (s *shareSim) join(want float64, weight int64) uint64 {
	s.t.Helper()
	sh, err := s.ee.AcquireShare(ShareRequest{Pool: s.pool, Want: want, Weight: weight, TTL: 3 * time.Second})
	if err != nil {
		s.t.Fatal(err)
	}
	s.held[sh.ID] = &simHolder{share: sh, next: s.ee.clk.Now().Add(sh.RefreshInterval), weights: float64(max(weight, 1))}
	s.order = append(s.order, sh.ID)
	s.applyPushes()
	s.check(fmt.Sprintf("after share %d joined", sh.ID))
	return sh.ID
}

// leave releases a holder's share.
func (s *shareSim) leave(id uint64) {
	s.t.Helper()
	if err := s.ee.ReleaseShare(s.pool, id); err != nil {
		s.t.Fatal(err)
	}
	delete(s.held, id)
	s.applyPushes()
	s.check(fmt.Sprintf("after share %d left", id))
}

// applyPushes gives every pushed update to its holder.
func (s *shareSim) applyPushes() {
	for _, u := range s.ee.takeUpdates() {
		h := s.held[u.Share.ID]
		if h == nil {
			continue
		}
		switch u.Kind {
		case ShareChanged:
			h.share = u.Share
		case ShareExpired, ShareRevoked:
			delete(s.held, u.Share.ID)
		}
	}
}

// step advances the clock by d and refreshes, in random order, every
// holder whose refresh is due (except the silent ones).
func (s *shareSim) step(d time.Duration) {
	s.t.Helper()
	s.ee.clk.Advance(d)
	s.applyPushes()
	s.check("after time passed")
	now := s.ee.clk.Now()
	var due []uint64
	for _, id := range s.order {
		if h := s.held[id]; h != nil && !s.silent[id] && !h.next.After(now) {
			due = append(due, id)
		}
	}
	s.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	for _, id := range due {
		sh, err := s.ee.RefreshShare(ShareRefresh{Pool: s.pool, ID: id})
		if err != nil {
			s.t.Fatalf("refresh of share %d: %v", id, err)
		}
		s.held[id].share, s.held[id].next = sh, now.Add(sh.RefreshInterval)
		s.applyPushes()
		s.check(fmt.Sprintf("after share %d refreshed", id))
	}
}

// assertFair checks that every live share has its fair value.
func (s *shareSim) assertFair(rate float64) {
	s.t.Helper()
	var ids []uint64
	for id := range s.held {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var wants, weights []float64
	for _, id := range ids {
		wants = append(wants, s.held[id].share.Want)
		weights = append(weights, s.held[id].weights)
	}
	ref := refFair(wants, weights, rate)
	for i, id := range ids {
		if got := s.held[id].share.Rate; math.Abs(got-ref[i]) > 1e-5*math.Max(1, ref[i]) {
			s.t.Fatalf("share %d (want %v, weight %v) has %v; its fair value is %v", id, wants[i], weights[i], got, ref[i])
		}
	}
}

// TestSharesConvergeToFair: 1, 5 and 50 holders of unequal wants (and
// weights) join one by one; the granted shares never sum above the rate,
// and within two refresh intervals of the last join every share has its
// fair value. Then holders leave and the rest converge again.
func TestSharesConvergeToFair(t *testing.T) {
	for _, n := range []int{1, 5, 50} {
		t.Run(fmt.Sprint(n, "clients"), func(t *testing.T) {
			const rate = 1000
			s := newShareSim(t, rate, uint64(n))
			for i := 0; i < n; i++ {
				want := float64(5 + s.rng.IntN(60*rate/n+1))
				weight := int64(1)
				if i%7 == 3 {
					weight = 3
				}
				s.join(want, weight)
				s.step(time.Duration(s.rng.IntN(300)) * time.Millisecond)
			}
			for i := 0; i < 20; i++ { // 2s: two refresh intervals
				s.step(100 * time.Millisecond)
			}
			s.assertFair(rate)
			for _, id := range s.order[:n/2] {
				s.leave(id)
				s.step(50 * time.Millisecond)
			}
			for i := 0; i < 20; i++ {
				s.step(100 * time.Millisecond)
			}
			s.assertFair(rate)
		})
	}
}

// TestShareJoinNoOvercommit: two holders share the whole rate; a third
// joins and gets only what is unallocated (nothing), then grows as the
// others give back at their refreshes, pushed to it at once; the sum stays
// within the rate at every step (checked by the sim).
func TestShareJoinNoOvercommit(t *testing.T) {
	s := newShareSim(t, 90, 7)
	a := s.join(100, 1)
	b := s.join(100, 1)
	if ga, gb := s.held[a].share.Rate, s.held[b].share.Rate; ga != 90 || gb != 0 {
		t.Fatalf("a %v b %v; a came first and takes all (b grows when a refreshes)", ga, gb)
	}
	s.step(time.Second) // both refresh: a shrinks to 45 at once, b grows to 45
	if ga, gb := s.held[a].share.Rate, s.held[b].share.Rate; ga != 45 || gb != 45 {
		t.Fatalf("after a refresh: a %v b %v; want 45 each", ga, gb)
	}
	c := s.join(100, 1)
	if gc := s.held[c].share.Rate; gc != 0 {
		t.Fatalf("the newcomer got %v while nothing was unallocated", gc)
	}
	s.step(time.Second)
	for _, id := range []uint64{a, b, c} {
		if g := s.held[id].share.Rate; g != 30 {
			t.Fatalf("after one refresh interval: share %d has %v; want 30", id, g)
		}
	}
}

// TestShareExpiryGivesBack: a holder that stops refreshing loses its share
// at its expiry, and the others get it (pushed).
func TestShareExpiryGivesBack(t *testing.T) {
	s := newShareSim(t, 100, 3)
	a := s.join(100, 1)
	s.step(time.Second)
	b := s.join(100, 1)
	s.step(time.Second)
	if s.held[a].share.Rate != 50 || s.held[b].share.Rate != 50 {
		t.Fatalf("a %v b %v", s.held[a].share.Rate, s.held[b].share.Rate)
	}
	s.silent[a] = true
	expire := s.held[a].share.ExpireTime
	for s.ee.clk.Now().Before(expire.Add(-100 * time.Millisecond)) {
		s.step(100 * time.Millisecond)
		if s.held[a] == nil {
			t.Fatal("the share expired early")
		}
	}
	for s.held[a] != nil {
		s.step(100 * time.Millisecond)
	}
	if got := s.held[b].share.Rate; got != 100 {
		t.Fatalf("after a's share expired, b has %v; want 100", got)
	}
	_, err := s.ee.RefreshShare(ShareRefresh{Pool: "api", ID: a})
	wantReason(t, err, apierr.ErrShareNotFound)
	if !strings.Contains(err.Error(), "expired") {
		t.Fatalf("refresh of an expired share: %v", err)
	}
}

// TestShareRateCutShrinksAtOnce: a lower effective rate shrinks the shares
// above their new fair values in the engine at once, and pushes them.
func TestShareRateCutShrinksAtOnce(t *testing.T) {
	s := newShareSim(t, 100, 5)
	a := s.join(30, 1)
	b := s.join(100, 1)
	if s.held[a].share.Rate != 30 || s.held[b].share.Rate != 70 {
		t.Fatal(s.held[a].share, s.held[b].share)
	}
	if _, err := s.ee.UpdatePool("api", func(c *PoolConfig) { c.Rate = 40 }); err != nil {
		t.Fatal(err)
	}
	s.applyPushes()
	s.check("after the rate was lowered")
	if s.held[a].share.Rate != 20 || s.held[b].share.Rate != 20 {
		t.Fatalf("after lowering the rate to 40: a %v b %v", s.held[a].share.Rate, s.held[b].share.Rate)
	}
	// An adaptive cut works the same way: 40 × 0.9 = 36.
	if _, err := s.ee.UpdatePool("api", func(c *PoolConfig) {
		c.Adaptive = AdaptiveConfig{Enabled: true, MinSamples: 1, Backoff: 0.9}
	}); err != nil {
		t.Fatal(err)
	}
	s.ee.report(t, "api", OutcomeError, 1)
	s.applyPushes()
	s.check("after an adaptive cut")
	if s.held[a].share.Rate != 18 || s.held[b].share.Rate != 18 {
		t.Fatalf("after the cut to 36: a %v b %v", s.held[a].share.Rate, s.held[b].share.Rate)
	}
	// Removing the rate revokes every share.
	if _, err := s.ee.UpdatePool("api", func(c *PoolConfig) { c.Rate, c.SafeRate, c.ConcurrencyLimit, c.Adaptive = 0, 0, 5, AdaptiveConfig{} }); err != nil {
		t.Fatal(err)
	}
	ups := s.ee.takeUpdates()
	if len(ups) != 2 || ups[0].Kind != ShareRevoked || ups[1].Kind != ShareRevoked {
		t.Fatalf("updates after the rate was removed: %+v", ups)
	}
	s.ee.checkAll(t, s.prev)
}

// TestShareCarvesTheBucket: exact tokens get the rate the shares do not
// hold.
func TestShareCarvesTheBucket(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "api", Rate: 10, Burst: 1})
	ctx := t.Context()
	if _, err := ee.Take(ctx, "api", 1, 0); err != nil { // the burst
		t.Fatal(err)
	}
	sh, err := ee.AcquireShare(ShareRequest{Pool: "api", Want: 10})
	if err != nil || sh.Rate != 10 || sh.Burst != 1 || sh.RefreshInterval != DefaultLeaseTTL/3 {
		t.Fatalf("share %+v, %v", sh, err)
	}
	ee.clk.Advance(time.Second)
	_, err = ee.Take(ctx, "api", 1, time.Hour)
	wantReason(t, err, apierr.ErrRateLimited)
	if !strings.Contains(err.Error(), "rate shares") || ee.status(t, "api").SharesGranted != 10 {
		t.Fatalf("take while shares hold the whole rate: %v", err)
	}
	w := ee.startAcquire(t, AcquireRequest{Pool: "api"}) // waits on the bucket, with no timer to wake it
	if err := ee.ReleaseShare("api", sh.ID); err != nil {
		t.Fatal(err)
	}
	ee.clk.Advance(100 * time.Millisecond)
	if _, err := w.result(t); err != nil {
		t.Fatalf("waiter after the share was given back: %v", err)
	}
	ee.checkAll(t, map[string]int64{})
}

func TestShareErrors(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "conc", ConcurrencyLimit: 5})
	ee.mustCreate(t, PoolConfig{Name: "api", Rate: 100})
	_, err := ee.AcquireShare(ShareRequest{Pool: "conc", Want: 1})
	wantReason(t, err, apierr.ErrNoRateLimit)
	_, err = ee.AcquireShare(ShareRequest{Pool: "nope", Want: 1})
	wantReason(t, err, apierr.ErrPoolNotFound)
	for _, r := range []ShareRequest{
		{Pool: "api", Want: 0}, {Pool: "api", Want: -1}, {Pool: "api", Want: math.NaN()}, {Pool: "api", Want: 2e9},
		{Pool: "api", Want: 1e-9}, {Pool: "api", Want: 1, Weight: -1}, {Pool: "api", Want: 1, Weight: MaxShareWeight + 1},
		{Pool: "api", Want: 1, TTL: time.Millisecond}, {Pool: "api", Want: 1, TTL: -1}, {Pool: "api", Want: 1, ClientID: strings.Repeat("x", MaxClientIDLen+1)},
	} {
		_, err := ee.AcquireShare(r)
		wantReason(t, err, apierr.ErrInvalidArgument)
	}
	_, err = ee.RefreshShare(ShareRefresh{Pool: "api", ID: 12345})
	wantReason(t, err, apierr.ErrShareNotFound)
	_, err = ee.RefreshShare(ShareRefresh{Pool: "api", ID: 1, Want: -1})
	wantReason(t, err, apierr.ErrInvalidArgument)
	wantReason(t, ee.ReleaseShare("api", 12345), apierr.ErrShareNotFound)
	for i := 0; i < MaxSharesPerPool; i++ {
		if _, err := ee.AcquireShare(ShareRequest{Pool: "api", Want: 1}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = ee.AcquireShare(ShareRequest{Pool: "api", Want: 1})
	wantReason(t, err, apierr.ErrTooManyShares)
	// Deleting the pool revokes them all.
	if err := ee.DeletePool("api", false); err != nil {
		t.Fatal(err)
	}
	if ups := ee.takeUpdates(); len(ups) != MaxSharesPerPool || ups[0].Kind != ShareRevoked {
		t.Fatalf("%d updates after deleting the pool", len(ups))
	}
}

// newSharePart returns a share table, on its own, of a pool with rate
// 100/s and burst 10, on a fake clock.
func newSharePart() (*shareTable, *fakeclock.Clock) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	t := new(shareTable)
	t.init(PoolConfig{Name: "p", Rate: 100, Burst: 10, SafeRate: 1}, 100, clk, new(fakeTimers))
	return t, clk
}

// addShare adds a share wanting want/s at now, granted what it may.
func addShare(t *shareTable, id uint64, want float64, now time.Time) *share {
	s := &share{id: id, want: toShareUnits(want), weight: 1, ttl: 3 * time.Second, grantAt: now, expire: now.Add(3 * time.Second), index: -1}
	t.add(s)
	t.setGrant(s, t.grantable(s))
	return s
}

// TestSharePartDividesAndFollowsTheRate drives the share table alone: a
// new share gets what no one holds; a lower rate shrinks shares at once
// (pushed); a share released gives its rate to the one below its target;
// no rate revokes every share.
func TestSharePartDividesAndFollowsTheRate(t *testing.T) {
	tab, clk := newSharePart()
	now := clk.Now()
	a := addShare(tab, 1, 80, now)
	b := addShare(tab, 2, 80, now)
	if a.granted != toShareUnits(80) || b.granted != toShareUnits(20) || tab.exactRate() != 0 {
		t.Fatalf("granted %v, %v; exact rate %v", fromShareUnits(a.granted), fromShareUnits(b.granted), tab.exactRate())
	}
	var ob outbox
	tab.setRate(60, &ob)
	if a.granted != toShareUnits(30) || b.granted != toShareUnits(30) || len(ob.shares) != 2 || ob.shares[0].Share.Rate != 30 || ob.shares[0].Share.Burst != 3 {
		t.Fatalf("after a cut to 60: %v, %v; pushed %+v", fromShareUnits(a.granted), fromShareUnits(b.granted), ob.shares)
	}
	ob = outbox{}
	tab.release(a, &ob)
	if b.granted != toShareUnits(60) || len(ob.shares) != 1 || ob.shares[0].Kind != ShareChanged {
		t.Fatalf("after a release: %v; pushed %+v", fromShareUnits(b.granted), ob.shares)
	}
	var s PoolStatus
	tab.status(&s, now)
	if s.ShareHolders != 1 || s.SharesGranted != 60 {
		t.Fatalf("status %+v", s)
	}
	ob = outbox{}
	tab.setRate(0, &ob)
	if len(tab.list) != 0 || tab.granted != 0 || len(ob.shares) != 1 || ob.shares[0].Kind != ShareRevoked {
		t.Fatalf("no rate: %d shares, %d granted; pushed %+v", len(tab.list), tab.granted, ob.shares)
	}
}

// TestSharePartExpires: the expiry timer is armed for the first share;
// expire ends the shares due, pushes ShareExpired, and their ids are
// explained as expired.
func TestSharePartExpires(t *testing.T) {
	tab, clk := newSharePart()
	s := addShare(tab, 7, 10, clk.Now())
	tab.arm(s.expire, clk.Now())
	if clk.Pending() != 1 {
		t.Fatalf("%d timers", clk.Pending())
	}
	var ob outbox
	if tab.expire(clk.Now(), &ob) {
		t.Fatal("a share expired early")
	}
	clk.Advance(3 * time.Second)
	tab.fired()
	if !tab.expire(clk.Now(), &ob) || len(tab.list) != 0 || len(ob.shares) != 1 || ob.shares[0].Kind != ShareExpired {
		t.Fatalf("expiry: %d shares left; pushed %+v", len(tab.list), ob.shares)
	}
	if err := tab.missingErr(7); !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("missing share: %v", err)
	}
	tab.stop()
}

// TestSharePartRecovery: after a restart the whole rate is phantom until
// the window ends; a share re-adopted takes its rate back out of it; a
// released id is not re-adopted later.
func TestSharePartRecovery(t *testing.T) {
	tab, clk := newSharePart()
	now := clk.Now()
	if !tab.restore(DurableState{ShareHorizon: now.Add(time.Minute), ShareTTLBound: time.Minute}, now) {
		t.Fatal("no window")
	}
	if tab.capacity() != 0 || tab.exactRate() != 0 || !tab.recovering(5) {
		t.Fatalf("capacity %d, exact rate %v", tab.capacity(), tab.exactRate())
	}
	s := tab.readopt(&ShareRefresh{ID: 5, Granted: 40}, 3*time.Second, now)
	if s.granted != toShareUnits(40) || tab.rec.phantom != toShareUnits(60) || tab.recovering(5) {
		t.Fatalf("re-adopted with %v, phantom %v", fromShareUnits(s.granted), fromShareUnits(tab.rec.phantom))
	}
	if !tab.released(6) || tab.recovering(6) || tab.released(6) {
		t.Fatal("a released id may be re-adopted")
	}
	var ob outbox
	if !tab.recovered(&ob) || tab.recovered(&ob) || tab.exactRate() != 60 {
		t.Fatalf("after the window: exact rate %v", tab.exactRate())
	}
}
