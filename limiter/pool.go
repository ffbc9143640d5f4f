package limiter

import (
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
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
//     alone, rateAlarm is armed for when it could be (unless shares hold
//     the whole rate: a share that gives rate back dispatches);
//   - if expiry is not empty, expiryAlarm is armed at or before its
//     earliest ExpireTime.
type pool struct {
	e    *Engine
	name string

	mu         poolMutex
	cfg        PoolConfig
	createTime time.Time
	updateTime int64 // Unix ns
	deleted    bool
	ngates     uint8      // gates in use
	susp       suspension // an operator's suspension, and DrainPool's waiters

	held      int64
	lastToken uint64
	leases    map[uint64]*lease
	byToken   leaseIndex // the leases in token order
	expiry    indexedHeap[*lease]
	ended     tombstones

	queue waitQueue // the acquires that wait, and the takes waiting for tokens

	bucket *rate.Limiter // nil when the pool has no rate
	// rateSince is when the bucket's rate or burst last changed (Unix ns).
	rateSince int64

	expiryAlarm alarm // the earliest expiry
	rateAlarm   alarm // when the bucket holds the head of the queue's tokens

	stats poolCounters // the gauges are computed by statusLocked

	dur durable  // durable reservations of tokens and expiries
	rec recovery // recovery window after a restart

	ad  adaptive     // effective limits and adaptive control
	shr shareTable   // rate shares
	csh *concShares  // concurrency shares: leases that resize; nil until the first ResizeLease
	out outbox       // events for the engine's callbacks, sent after unlocking
	res *resourceSet // instances of an active or passive pool, nil in a free pool

	mk    markState // event marks
	waits waitHist  // wait times of recent grants, and rate tokens
	born  int64     // when this engine made the pool, Unix ns (createTime may be older, after a restart)

	gates [maxGates]gate // the parts that decide grants, in order (newPool); ngates of them
}

// maxGates is the number of gates a pool may have: its effective
// concurrency limit, its recovery window, a suspension, its instances.
const maxGates = 4

// A part is one feature of a pool with state of its own (adaptive limits,
// the recovery window, suspension, instances, rate shares, event marks).
// The pool calls every part, under its lock, when it reports its status
// and when it stops for good, rather than naming each feature there.
type part interface {
	// stop stops the part's timers for good (pool deleted, engine closed).
	stop()
	// status fills in the part's fields of s.
	status(s *PoolStatus, now time.Time)
}

// A gate is a part that may hold back a grant: admitLocked asks every gate
// before it takes tokens from the bucket.
type gate interface {
	part
	// admits reports whether weight more permits may be granted at now,
	// with held permits held. It must not change anything: a later gate
	// or the bucket may refuse.
	admits(held, weight int64, now time.Time) bool
	// describe says where the pool stands against the gate, with held
	// permits held, for the messages of acquires it cannot grant; empty
	// when there is nothing to say.
	describe(held int64, now time.Time) string
}

// newPool returns a pool whose first fencing token will be above
// tokenFloor.
func newPool(e *Engine, cfg PoolConfig, now time.Time, tokenFloor uint64) *pool {
	p := &pool{
		e:          e,
		name:       cfg.Name,
		cfg:        cfg,
		createTime: now,
		updateTime: now.UnixNano(),
		born:       now.UnixNano(),
		leases:     make(map[uint64]*lease),
		lastToken:  tokenFloor,
	}
	p.dur.init(&e.durEnv, (*poolDurHost)(p), DurableState{TokenCeiling: tokenFloor + minTokenBlock, TTLBound: cfg.MaxLeaseTTL, LiveMark: tokenFloor})
	// The gates in the order a grant is checked: the effective
	// concurrency limit, the recovery window, a suspension, the instances.
	p.gates = [maxGates]gate{&p.ad, &p.rec, &p.susp}
	p.ngates = 3
	if cfg.ResourceKind != ResourceFree { // the kind never changes
		p.res = newResourceSet()
		p.gates[p.ngates] = p.res
		p.ngates++
	}
	// Effective limits = configured. The parts' timers (the raise of
	// lowered limits, the expiry of rate shares and the end of their
	// recovery window, the end of a low-utilisation period) call back
	// through poolTimers.
	timers := (*poolTimers)(p)
	p.ad.init(cfg, e.clock, timers)
	p.shr.init(cfg, p.ad.rate, e.clock, timers)
	p.mk.init(e.clock, timers, e.onPoolEvent != nil, e.markInterval)
	p.applyRateLocked(now)
	p.configureLocked(now) // event marks, the recovery window, the held-weight bound
	return p
}

// configureLocked gives the parts the pool's configuration, at its
// creation and when UpdatePool changed it: the effective limits follow it
// (adaptive.configure), the shares a new effective rate, the marks, the
// recovery window and the held-weight bound theirs. The caller adjusts
// the bucket.
func (p *pool) configureLocked(now time.Time) {
	p.shr.configure(p.cfg)
	if p.ad.configure(p.cfg) {
		p.shr.setRate(p.ad.rate, &p.out)
	}
	p.ad.arm(now)
	p.mk.configure(p.cfg, p.held)
	p.rec.configure(p.cfg.ConcurrencyLimit > 0 || p.cfg.ResourceKind != ResourceFree)
	heldLimit := p.cfg.ConcurrencyLimit // the held-weight bound is kept in pools without instances
	if p.cfg.ResourceKind != ResourceFree {
		heldLimit = 0
	}
	p.dur.configure(heldLimit)
}

// onTimer runs a part's timer callback: under the pool's lock, fired (if
// not nil) notes that the timer went off; then, unless the pool is
// deleted or the engine frozen, run does the part's work at the engine's
// time. What it puts in the outbox is delivered after unlocking.
func (p *pool) onTimer(fired func(), run func(now time.Time)) {
	p.mu.Lock()
	defer p.unlock()
	if fired != nil {
		fired()
	}
	if p.deleted || !p.e.acting() {
		return
	}
	run(p.e.clock.Now())
}

// timerHost is told when a part's timer goes off. The pool implements it
// (poolTimers), so that a part's timer reaches its pool without the part
// holding it, and a pool makes no callback until a part arms a timer.
type timerHost interface {
	adaptiveFired()
	sharesFired()
	shareRecoveryFired()
	marksFired()
}

// poolTimers is a pool seen from its timers: its parts' (timerHost) and
// its own (the expiry and rate alarms).
type poolTimers pool

// expiryFired ends the leases that are due, re-arms for the next one and
// grants waiters the freed permits.
func (t *poolTimers) expiryFired() {
	p := (*pool)(t)
	p.onTimer(p.expiryAlarm.rang, func(now time.Time) {
		ended := p.expireDueLocked(now)
		if next, ok := p.expiry.top(); ok {
			armAlarm(&p.expiryAlarm, p.e.clock, next.ExpireTime, now, (*poolTimers).expiryFired, t)
		}
		if len(ended) > 0 {
			p.dispatchLocked(now)
		}
		p.endedLocked(ended)
	})
}

// rateFired grants the waiters the bucket now has the tokens for.
func (t *poolTimers) rateFired() {
	p := (*pool)(t)
	p.onTimer(p.rateAlarm.rang, func(now time.Time) {
		if p.bucket != nil {
			p.dispatchLocked(now)
		}
	})
}

func (t *poolTimers) adaptiveFired() {
	p := (*pool)(t)
	p.onTimer(p.ad.fired, func(now time.Time) { p.adaptedLocked(p.ad.tick(now), now) })
}

func (t *poolTimers) sharesFired() {
	p := (*pool)(t)
	p.onTimer(p.shr.fired, func(now time.Time) {
		if p.shr.expire(now, &p.out) {
			p.applyRateLocked(now)
		}
		if next, ok := p.shr.expiry.top(); ok {
			p.shr.arm(next.expire, now)
		}
		if p.queue.len() > 0 {
			p.dispatchLocked(now)
		}
	})
}

func (t *poolTimers) shareRecoveryFired() {
	p := (*pool)(t)
	p.onTimer(nil, func(now time.Time) {
		if p.shr.recovered(&p.out) { // the phantom rate goes to the shares and the bucket
			p.applyRateLocked(now)
			p.dispatchLocked(now)
		}
	})
}

func (t *poolTimers) marksFired() {
	p := (*pool)(t)
	p.onTimer(nil, func(time.Time) { p.mk.endPeriod(p.loadLocked(), p.susp.on || p.rec.blocks(), &p.out) })
}

// applyRateLocked makes the bucket match the effective rate, less the rate
// granted as shares (shareTable.exactRate), and cfg.Burst.
func (p *pool) applyRateLocked(now time.Time) {
	switch r := rate.Limit(p.shr.exactRate()); {
	case p.cfg.Rate == 0:
		p.bucket = nil
		p.rateAlarm.stop()
	case p.bucket == nil:
		p.bucket = rate.NewLimiter(r, int(p.cfg.Burst))
		p.bucket.SetLimitAt(now, r) // start the bucket's clock full at now
		p.rateSince = now.UnixNano()
	default:
		if p.bucket.Limit() != r || p.bucket.Burst() != int(p.cfg.Burst) {
			p.rateSince = now.UnixNano()
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
		return errorf(apierr.ErrInvalidArgument, "weight %d exceeds the %d instances any pool may hold; it could never be granted", weight, MaxResourcesPerPool)
	}
	if p.cfg.ResourceKind == ResourceActive && weight > int64(p.res.usable()) {
		return errorf(apierr.ErrInvalidArgument, "weight %d exceeds active pool %q's %d instances; it could never be granted until an operator adds more", weight, p.name, p.res.usable())
	}
	if p.cfg.ConcurrencyLimit > 0 && weight > p.cfg.ConcurrencyLimit {
		return errorf(apierr.ErrInvalidArgument, "weight %d exceeds pool %q's concurrency limit %d; it could never be granted", weight, p.name, p.cfg.ConcurrencyLimit)
	}
	if p.bucket != nil && weight > p.cfg.Burst {
		return errorf(apierr.ErrInvalidArgument, "weight %d exceeds pool %q's burst of %d tokens; it could never be granted", weight, p.name, p.cfg.Burst)
	}
	return nil
}

// reserveLocked makes sure that the next fencing token, a lease granted
// or renewed at now to expire at expiry, and weight more held (0 for a
// renewal) are within what is durably reserved, writing new reservations
// first if they are not (durable.reserve). It is called before every
// grant, renewal and re-adoption. Errors: apierr.ErrStorageFailed; the caller
// must then not grant.
func (p *pool) reserveLocked(now, expiry time.Time, weight int64) error {
	return p.dur.reserve(p.lastToken, p.rec.weightHeld(p.held), now, expiry, weight)
}

// admitLocked reports whether weight can be granted at now and, if so,
// takes its tokens from the bucket. It does not look at the wait queue.
// The gates see as held what the pool's leases may hold: the weight held,
// and what leases from before a restart not re-adopted yet may hold (the
// recovery window's gate holds back the rest).
func (p *pool) admitLocked(weight int64, now time.Time) bool {
	held := p.held + p.rec.unknownHeld()
	for _, g := range p.gates[:p.ngates] {
		if !g.admits(held, weight, now) {
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
		p.res.bind(l, p.cfg.Selection)
	}
	p.leases[l.FencingToken] = l
	p.byToken.add(l)
	p.dur.granted(l.FencingToken)
	p.expiry.push(l)
	p.held += g.weight
	p.stats.Granted++
	p.waits.record(now, waited)
	armAlarm(&p.expiryAlarm, p.e.clock, l.ExpireTime, now, (*poolTimers).expiryFired, (*poolTimers)(p))
	p.marksLocked()
	return l.Lease, nil
}

// removeLeaseLocked takes l out of the pool and frees its permits.
func (p *pool) removeLeaseLocked(l *lease) {
	delete(p.leases, l.FencingToken)
	p.byToken.remove(l)
	p.dur.leaseEnded(l.FencingToken)
	p.csh.forget(l.FencingToken)
	p.expiry.remove(l)
	p.held -= l.Weight
	now := p.e.clock.Now()
	if p.res != nil {
		p.res.unbind(l, now)
	}
	if p.held == 0 {
		p.susp.notifyDrained()
	}
	p.marksLocked()
	p.dur.lowerHeldBound(p.rec.weightHeld(p.held), now, 0)
}

// dispatchLocked grants waiters from the head of the queue while they fit.
// Call it after anything that may free capacity or change the head. A
// frozen engine (Options.Live) grants nothing, whatever freed capacity.
func (p *pool) dispatchLocked(now time.Time) {
	if !p.e.acting() {
		return
	}
	for {
		w, ok := p.queue.heap.top()
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
		p.queue.remove(w)
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
	for _, w := range p.queue.heap {
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
	armAlarm(&p.rateAlarm, p.e.clock, now.Add(d), now, (*poolTimers).rateFired, (*poolTimers)(p))
}

// stopTimersLocked stops its timers and its parts' for good (pool deleted, engine closed).
func (p *pool) stopTimersLocked() {
	p.expiryAlarm.stop()
	p.rateAlarm.stop()
	p.shr.stop()
	p.mk.stop()
	for _, g := range p.gates[:p.ngates] {
		g.stop()
	}
}

// statusLocked returns the live status.
func (p *pool) statusLocked(now time.Time) PoolStatus {
	s := p.stats.status()
	s.Held = p.held
	s.Leases = int64(len(p.leases))
	s.Waiting = int64(p.queue.len())
	s.WaitingWeight = p.queue.weight
	s.LastFencingToken = p.lastToken
	p.shr.status(&s, now)
	p.mk.status(&s, now)
	for _, g := range p.gates[:p.ngates] {
		g.status(&s, now)
	}
	s.Utilisation = p.loadLocked().utilisation(p.held)
	if p.bucket != nil {
		s.TokensAvailable = p.bucket.TokensAt(now)
	}
	return s
}

func (p *pool) infoLocked(now time.Time) PoolInfo {
	return PoolInfo{Config: p.cfg, CreateTime: p.createTime, UpdateTime: time.Unix(0, p.updateTime).UTC(), Status: p.statusLocked(now)}
}
