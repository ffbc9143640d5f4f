package limiter

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// pool is one named pool. Every field below mu is guarded by mu.
//
// Invariants, true whenever mu is not held:
//   - held is the sum of the weights of the leases in leases, and every
//     lease in leases is in expiry and vice versa;
//   - a grant is made only if held+weight <= the effective concurrency
//     limit ad.limit (when the pool has a limit) and the bucket
//     had the tokens at that instant (when there is a rate); held may
//     exceed the limit only because it was lowered under it;
//   - every waiter in waiters is not done, and every wait that ended under
//     mu is in out.waits until unlock delivers its outcome;
//   - the head of waiters is not grantable now (dispatch ran after the last
//     change that could make it so), and when it is blocked by the bucket
//     alone, rateTimer is armed for when it could be (unless shares hold
//     the whole rate: a share that gives rate back dispatches);
//   - if expiry is not empty, expiryTimer is armed at or before its
//     earliest ExpireTime.
type pool struct {
	e    *Engine
	name string

	mu         poolMutex
	cfg        PoolConfig
	createTime time.Time
	updateTime time.Time
	deleted    bool
	susp       suspension // an operator's suspension, and DrainPool's waiters

	held      int64
	lastToken uint64
	leases    map[uint64]*lease
	byToken   leaseIndex // the leases in token order
	expiry    indexedHeap[*lease]
	ended     tombstones

	waiters       indexedHeap[*waiter]
	ranked        *waiter            // every waiter, in a rank treap (rankTree)
	clientQueues  map[string]*waiter // client id -> its waiters' rank treap
	waitingWeight int64
	seq           uint64
	takesWaiting  int64 // takes waiting for their tokens; they count toward max_waiters

	bucket *rate.Limiter // nil when the pool has no rate
	// rateSince is when the bucket's rate or burst last changed.
	rateSince time.Time

	expiryTimer Timer
	expiryAt    time.Time // when expiryTimer fires; zero when not armed
	rateTimer   Timer
	rateAt      time.Time // when rateTimer fires; zero when not armed

	stats PoolStatus // counters only; the gauges are computed by statusLocked

	dur durable  // durable reservations of tokens and expiries
	rec recovery // recovery window after a restart

	ad  adaptive     // effective limits and adaptive control
	shr shareTable   // rate shares
	csh concShares   // concurrency shares: leases that resize
	out outbox       // events for the engine's callbacks, sent after unlocking
	res *resourceSet // instances of an active or passive pool, nil in a free pool

	mk    markState // event marks
	waits waitHist  // wait times of recent grants, and rate tokens
	born  time.Time // when this engine made the pool (createTime may be older, after a restart)

	parts []part // the features above that take part in status and stop
	gates []gate // those of parts that also decide grants, in order
}

// A part is one feature of a pool with state of its own (adaptive limits,
// the recovery window, suspension, instances, rate shares, event marks).
// The pool calls every part, under its lock, when it reports its status
// and when it stops for good, rather than naming each feature there.
type part interface {
	// stop stops the part's timers for good (pool deleted, engine closed).
	stop()
	// status fills in the part's fields of s.
	status(p *pool, s *PoolStatus, now time.Time)
}

// A gate is a part that may hold back a grant: admitLocked asks every gate
// before it takes tokens from the bucket.
type gate interface {
	part
	// admits reports whether weight more permits may be granted at now.
	// It must not change anything: a later gate or the bucket may refuse.
	admits(p *pool, weight int64, now time.Time) bool
	// describe says where the pool stands against the gate, for the
	// messages of acquires it cannot grant; empty when there is nothing
	// to say.
	describe(p *pool, now time.Time) string
}

// newPool returns a pool whose first fencing token will be above
// tokenFloor.
func newPool(e *Engine, cfg PoolConfig, now time.Time, tokenFloor uint64) *pool {
	p := &pool{
		e:          e,
		name:       cfg.Name,
		cfg:        cfg,
		createTime: now,
		updateTime: now,
		born:       now,
		leases:     make(map[uint64]*lease),
		lastToken:  tokenFloor,
	}
	// The gates in the order a grant is checked: the effective
	// concurrency limit, the recovery window, a suspension, the instances.
	p.gates = []gate{&p.ad, &p.rec, &p.susp}
	if cfg.ResourceKind != ResourceFree { // the kind never changes
		p.res = newResourceSet()
		p.gates = append(p.gates, p.res)
	}
	p.parts = []part{&p.shr, &p.mk}
	for _, g := range p.gates {
		p.parts = append(p.parts, g)
	}
	p.initAdaptiveLocked() // effective limits = configured
	p.applyRateLocked(now)
	p.initDurableLocked(DurableState{TokenCeiling: tokenFloor + minTokenBlock, TTLBound: cfg.MaxLeaseTTL, LiveMark: tokenFloor})
	p.applyMarksLocked() // event marks
	return p
}

// applyRateLocked makes the bucket match the effective rate, less the rate
// granted as shares (exactRateLocked), and cfg.Burst.
func (p *pool) applyRateLocked(now time.Time) {
	switch r := rate.Limit(p.exactRateLocked()); {
	case p.cfg.Rate == 0:
		p.bucket = nil
		p.stopRateTimerLocked()
	case p.bucket == nil:
		p.bucket = rate.NewLimiter(r, int(p.cfg.Burst))
		p.bucket.SetLimitAt(now, r) // start the bucket's clock full at now
		p.rateSince = now
	default:
		if p.bucket.Limit() != r || p.bucket.Burst() != int(p.cfg.Burst) {
			p.rateSince = now
		}
		p.bucket.SetLimitAt(now, r)
		p.bucket.SetBurstAt(now, int(p.cfg.Burst))
	}
}

// checkWeightLocked reports a weight that this pool could never grant.
// In an active pool, that is also a weight above its instances (less those
// being removed): an operator must add instances first. A passive pool's
// capacity comes and goes with its providers, so there a waiter may wait
// for more.
func (p *pool) checkWeightLocked(weight int64) error {
	if p.res != nil && weight > MaxResourcesPerPool {
		return errorf(ErrInvalidArgument, "weight %d exceeds the %d instances any pool may hold; it could never be granted", weight, MaxResourcesPerPool)
	}
	if p.cfg.ResourceKind == ResourceActive && weight > int64(p.res.usable()) {
		return errorf(ErrInvalidArgument, "weight %d exceeds active pool %q's %d instances; it could never be granted until an operator adds more", weight, p.name, p.res.usable())
	}
	if p.cfg.ConcurrencyLimit > 0 && weight > p.cfg.ConcurrencyLimit {
		return errorf(ErrInvalidArgument, "weight %d exceeds pool %q's concurrency limit %d; it could never be granted", weight, p.name, p.cfg.ConcurrencyLimit)
	}
	if p.bucket != nil && weight > p.cfg.Burst {
		return errorf(ErrInvalidArgument, "weight %d exceeds pool %q's burst of %d tokens; it could never be granted", weight, p.name, p.cfg.Burst)
	}
	return nil
}

// resolveTTLLocked returns the TTL to grant for a request of ttl (0 means
// the pool's default), or an error naming the allowed range.
func (p *pool) resolveTTLLocked(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return p.cfg.DefaultLeaseTTL, nil
	}
	if ttl < MinLeaseTTL || ttl > p.cfg.MaxLeaseTTL {
		return 0, errorf(ErrInvalidArgument, "ttl %v is out of range for pool %q: use %v to its max_lease_ttl %v", ttl, p.name, MinLeaseTTL, p.cfg.MaxLeaseTTL)
	}
	return ttl, nil
}

// admitLocked reports whether weight can be granted at now and, if so,
// takes its tokens from the bucket. It does not look at the wait queue.
func (p *pool) admitLocked(weight int64, now time.Time) bool {
	for _, g := range p.gates {
		if !g.admits(p, weight, now) {
			return false
		}
	}
	if p.bucket != nil { // last: it takes the tokens
		if !p.bucket.AllowN(now, int(weight)) {
			p.armRateTimerLocked(weight, now)
			return false
		}
		p.stats.TokensGranted += weight
		p.waits.addTokens(now, weight) // for the rate's utilisation
	}
	return true
}

// grantLocked creates a lease for req, which admitLocked has just admitted
// after it waited for waited (0: granted at once; recorded in the pool's
// wait times). It fails only when the token or expiry reservation cannot
// be written; then nothing is granted, and the rate tokens admitLocked
// took stay spent (erring on the side of granting less).
func (p *pool) grantLocked(g *grantRequest, now time.Time, waited time.Duration) (Lease, error) {
	ttl := min(g.ttl, p.cfg.MaxLeaseTTL) // the maximum may have been lowered while g waited
	if err := p.reserveLocked(now, now.Add(ttl), g.weight); err != nil {
		p.stats.Rejected++
		return Lease{}, err
	}
	p.lastToken++
	l := &lease{
		Lease: Lease{
			Pool:         p.name,
			FencingToken: p.lastToken,
			Weight:       g.weight,
			Priority:     g.priority,
			ClientID:     g.clientID,
			Description:  g.description,
			TTL:          ttl,
			AcquireTime:  now,
			ExpireTime:   now.Add(ttl),
		},
		owner: g.owner,
	}
	if p.res != nil {
		p.bindLocked(l)
	}
	p.leases[l.FencingToken] = l
	p.byToken.add(l)
	if p.e.persister != nil {
		p.dur.live.grant(l.FencingToken)
	}
	p.expiry.push(l)
	p.held += g.weight
	p.stats.Granted++
	p.waits.record(now, waited)
	p.armExpiryTimerLocked(l.ExpireTime, now)
	p.marksLocked()
	return l.Lease, nil
}

// removeLeaseLocked takes l out of the pool and frees its permits.
func (p *pool) removeLeaseLocked(l *lease) {
	delete(p.leases, l.FencingToken)
	p.byToken.remove(l)
	if p.e.persister != nil {
		p.dur.live.end(l.FencingToken)
	}
	p.forgetConcShareLocked(l.FencingToken)
	p.expiry.remove(l)
	p.held -= l.Weight
	now := p.e.clock.Now()
	if p.res != nil {
		p.unbindLocked(l, now)
	}
	if p.held == 0 {
		p.notifyDrainedLocked()
	}
	p.marksLocked()
	p.lowerHeldBoundLocked(now, 0)
}

// dispatchLocked grants waiters from the head of the queue while they fit.
// Call it after anything that may free capacity or change the head. A
// frozen engine (Options.Live) grants nothing, whatever freed capacity.
func (p *pool) dispatchLocked(now time.Time) {
	if !p.e.acting() {
		return
	}
	for {
		w, ok := p.waiters.top()
		if !ok || !p.admitLocked(w.g.weight, now) {
			break
		}
		l, err := p.grantLocked(&w.g, now, now.Sub(w.enqueued)) // on error, w fails and the next head is tried
		p.finishWaiterLocked(w, l, err)
	}
	p.rebalanceConcSharesLocked(now)
}

// finishWaiterLocked ends w's wait with a lease or an error, once; the
// pool's unlock delivers the outcome.
func (p *pool) finishWaiterLocked(w *waiter, l Lease, err error) {
	if w.wait.endedLocked() {
		return
	}
	if w.index >= 0 {
		p.waiters.remove(w)
		p.rankRemoveLocked(w)
		p.waitingWeight -= w.g.weight
		p.marksLocked()
	}
	if w.timeout != nil {
		w.timeout.t.Stop()
	}
	w.wait.endLocked(l, err)
}

// failWaitersLocked ends the wait of every waiter for which fail returns
// an error.
func (p *pool) failWaitersLocked(fail func(*waiter) error) {
	type failure struct {
		w   *waiter
		err error
	}
	var failed []failure
	for _, w := range p.waiters {
		if err := fail(w); err != nil {
			failed = append(failed, failure{w, err})
		}
	}
	for _, f := range failed {
		p.finishWaiterLocked(f.w, Lease{}, f.err)
	}
}

// expireDueLocked ends every lease whose ExpireTime is at or before now and
// returns them. It does not dispatch.
func (p *pool) expireDueLocked(now time.Time) []LeaseEnded {
	var ended []LeaseEnded
	for {
		l, ok := p.expiry.top()
		if !ok || l.ExpireTime.After(now) {
			return ended
		}
		p.removeLeaseLocked(l)
		p.stats.Expired++
		p.ended.add(l.FencingToken, EndExpired, l.ExpireTime)
		ended = append(ended, LeaseEnded{Lease: l.Lease, Reason: EndExpired, Owner: l.owner})
	}
}

// armExpiryTimerLocked makes sure the expiry timer fires no later than at.
func (p *pool) armExpiryTimerLocked(at, now time.Time) {
	if !p.expiryAt.IsZero() && !at.Before(p.expiryAt) {
		return
	}
	p.expiryAt = at
	if p.expiryTimer == nil {
		p.expiryTimer = p.e.clock.AfterFunc(at.Sub(now), p.onExpiryTimer)
	} else {
		p.expiryTimer.Reset(at.Sub(now))
	}
}

// onExpiryTimer ends the leases that are due, re-arms for the next one and
// grants waiters the freed permits.
func (p *pool) onExpiryTimer() {
	p.mu.Lock()
	p.expiryAt = time.Time{}
	if p.deleted || !p.e.acting() {
		p.unlock()
		return
	}
	now := p.e.clock.Now()
	ended := p.expireDueLocked(now)
	if next, ok := p.expiry.top(); ok {
		p.armExpiryTimerLocked(next.ExpireTime, now)
	}
	if len(ended) > 0 {
		p.dispatchLocked(now)
	}
	p.endedLocked(ended)
	p.unlock()
}

// armRateTimerLocked arms the rate timer for when the bucket will hold
// weight tokens, unless it is armed for earlier already.
func (p *pool) armRateTimerLocked(weight int64, now time.Time) {
	r := float64(p.bucket.Limit()) // the effective rate less shares: applyRateLocked
	if r <= 0 {
		return // no refill while shares hold the whole rate; a share given back dispatches
	}
	deficit := float64(weight) - p.bucket.TokensAt(now)
	// At most a day ahead, so that a tiny rate cannot overflow the
	// duration; the timer then looks again.
	d := time.Duration(math.Ceil(min(deficit/r, 86400) * float64(time.Second)))
	if d <= 0 {
		d = 1 // float rounding: the tokens are a hair short; look again just after
	}
	at := now.Add(d)
	if !p.rateAt.IsZero() && !at.Before(p.rateAt) {
		return
	}
	p.rateAt = at
	if p.rateTimer == nil {
		p.rateTimer = p.e.clock.AfterFunc(d, p.onRateTimer)
	} else {
		p.rateTimer.Reset(d)
	}
}

func (p *pool) onRateTimer() {
	p.mu.Lock()
	defer p.unlock()
	p.rateAt = time.Time{}
	if p.deleted || p.bucket == nil || !p.e.acting() {
		return
	}
	p.dispatchLocked(p.e.clock.Now())
}

func (p *pool) stopRateTimerLocked() {
	if p.rateTimer != nil {
		p.rateTimer.Stop()
	}
	p.rateAt = time.Time{}
}

// stopTimersLocked stops both timers for good (pool deleted, engine closed).
func (p *pool) stopTimersLocked() {
	if p.expiryTimer != nil {
		p.expiryTimer.Stop()
	}
	p.expiryAt = time.Time{}
	p.stopRateTimerLocked()
	for _, pt := range p.parts {
		pt.stop()
	}
}

// statusLocked returns the live status.
func (p *pool) statusLocked(now time.Time) PoolStatus {
	s := p.stats
	s.Held = p.held
	s.Leases = int64(len(p.leases))
	s.Waiting = int64(len(p.waiters))
	s.WaitingWeight = p.waitingWeight
	s.LastFencingToken = p.lastToken
	for _, pt := range p.parts {
		pt.status(p, &s, now)
	}
	if p.bucket != nil {
		s.TokensAvailable = p.bucket.TokensAt(now)
	}
	return s
}

func (p *pool) infoLocked(now time.Time) PoolInfo {
	return PoolInfo{Config: p.cfg, CreateTime: p.createTime, UpdateTime: p.updateTime, Status: p.statusLocked(now)}
}

// missingLeaseErrLocked explains why token is not a live lease of the pool.
func (p *pool) missingLeaseErrLocked(token uint64) error {
	if t, ok := p.ended.lookup(token); ok && t.reason == EndRevoked {
		return errorf(ErrLeaseRevoked, "lease %d of pool %q was revoked at %s: %s; its permits went back to the pool; stop the work it protected and acquire a new lease", token, p.name, t.at.UTC().Format(time.RFC3339Nano), t.msg)
	}
	if t, ok := p.ended.lookup(token); ok {
		return errorf(ErrLeaseExpired, "lease %d of pool %q expired at %s: it was not renewed within its TTL and its permits went back to the pool; stop the work it protected and acquire a new lease", token, p.name, t.at.UTC().Format(time.RFC3339Nano))
	}
	if token > p.lastToken {
		return errorf(ErrLeaseNotFound, "pool %q never issued lease %d (its newest is %d); pass the lease id exactly as Acquire returned it", p.name, token, p.lastToken)
	}
	return errorf(ErrLeaseNotFound, "lease %d is not held in pool %q: it was released, or it ended long ago", token, p.name)
}
