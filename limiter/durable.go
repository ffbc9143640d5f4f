package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// durable is a pool's durable part: its DurableState, the writes that
// move it forward (ahead of the grants that rely on it, in the
// foreground or the background), and its live set. It is guarded by the
// pool's mutex, except for what its writer guards. It reaches its pool
// only through host, and its engine through env.
type durable struct {
	env  *durEnv
	host durHost
	// limit is the concurrency limit a held-weight bound is kept against:
	// the pool's, in a pool without instances; 0 when none is kept.
	limit int64

	state       DurableState
	tokenBlock  uint64 // tokens the next write reserves
	lastTokenAt int64  // when a write last had to move TokenCeiling (Unix ns; 0: never)
	// liveFlushed is when the last background write of the live set began.
	liveFlushed int64 // Unix ns
	live        liveSet
	// heldLowered is when a write lowering HeldBound was last decided,
	// lowerArmed says a timer will try to lower it again (lowerHeldBound),
	// and heldUnsure that a write of it failed: what is on disk may differ
	// from state.HeldBound (heldWriteFailed).
	heldLowered int64 // Unix ns
	lowerArmed  bool
	heldUnsure  bool
	flushing    bool   // a background write of the live set is running
	w           writer // every write of the pool goes through it
}

// unixNano is the time of ns Unix nanoseconds, and the zero time for 0
// (never), as a part keeps an instant in 8 bytes rather than 24.
func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// durEnv is what the durable parts of an engine's pools share of it.
type durEnv struct {
	persister    Persister // nil: in memory only
	clock        Clock
	horizonSlack time.Duration
	preReserve   bool
	closed       *atomic.Bool    // the engine is closed: no background write starts
	bg           *sync.WaitGroup // background writes in flight: Close waits for them
	acting       func() bool     // the engine may write (Options.Live)
}

// durHost is what a pool's durable part needs of its pool, for the
// records it writes and the writes it makes on its own, in the
// background.
type durHost interface {
	lock()   // takes the pool's lock
	unlock() // releases it
	// record is the pool as recorded, with configuration cfg (nil: its
	// own), less its durable state and live set: State holds only
	// LiveMark, the last fencing token issued.
	record(cfg *PoolConfig) SavedPool
	// heldNow is the weight the pool's leases may hold now.
	heldNow() weightHeld
	// poolName is the pool's name, for messages.
	poolName() string
	// gone reports that the pool was deleted.
	gone() bool
}

// weightHeld is the weight a pool's live leases may hold: the weight held,
// and what leases from before a restart not re-adopted yet may hold.
type weightHeld struct {
	held int64 // both
	// bounded: the latter is bounded (no recovery window, or one whose
	// record kept a held-weight bound).
	bounded bool
}

// init makes d the durable part of its host's pool, whose
// reservations are those of st (with a Persister; unreachable ones
// without).
func (d *durable) init(env *durEnv, host durHost, st DurableState) {
	d.env, d.host = env, host
	d.reset(st)
}

// reset makes st the reservations in force: the ones of st with a
// Persister, unreachable ones without. Nothing else is kept.
func (d *durable) reset(st DurableState) {
	if d.env.persister == nil {
		st = DurableState{TokenCeiling: noPersistCeiling, LeaseHorizon: noPersistHorizon, TTLBound: MaxLeaseTTLLimit, ShareHorizon: noPersistHorizon, ShareTTLBound: MaxLeaseTTLLimit, HeldBound: -1}
		*d = durable{env: d.env, host: d.host, limit: d.limit, state: st}
		return
	}
	*d = durable{env: d.env, host: d.host, limit: d.limit, state: st, tokenBlock: minTokenBlock}
}

// configure keeps the held-weight bound against concurrency limit limit
// (0: none kept), after the pool's configuration changed.
func (d *durable) configure(limit int64) { d.limit = limit }

// saved returns the pool as the Persister records it, with configuration
// cfg (nil: the pool's) and state st.
func (d *durable) saved(cfg *PoolConfig, st DurableState) SavedPool {
	sp := d.host.record(cfg)
	st.LiveMark, st.LegacyEnded = sp.State.LiveMark, nil
	st.Unsure, sp.LiveChunks, sp.liveVers = d.live.snapshot()
	sp.State = st
	return sp
}

// write records the pool with configuration cfg (nil: the pool's) and the
// state in force,
// as edit changes it (nil: as it is), before the change it describes
// becomes visible; without a Persister it does nothing. what says what is
// being done, for the error.
func (d *durable) write(cfg *PoolConfig, edit func(*SavedPool), what string) error {
	if d.env.persister == nil {
		return nil
	}
	sp := d.saved(cfg, d.state)
	if edit != nil {
		edit(&sp)
	}
	return d.save(sp, what)
}

// reserve makes sure that the next fencing token (above lastToken), a
// lease granted or renewed at now to expire at expiry, and weight more
// held (0 for a renewal) beside h are within what is durably reserved,
// writing new reservations first if they are not. It is called before
// every grant, renewal and re-adoption; the check is four comparisons,
// and a write happens only when the next token would pass TokenCeiling
// (which then moves a block of tokens past the last issued), the TTL would
// pass TTLBound (which then grows to it), expiry would pass LeaseHorizon,
// or the held weight would pass HeldBound (which then grows: heldBound);
// every write also moves LeaseHorizon to now + TTLBound + slack if that is
// later. It fails with apierr.ErrStorageFailed when the write fails; the caller
// must then not grant.
//
// TTLBound follows the TTLs in use, not MaxLeaseTTL, so that the recovery
// window after a restart is as long as the leases really are (15s by
// default), not as long as they could be (5m by default).
func (d *durable) reserve(lastToken uint64, h weightHeld, now, expiry time.Time, weight int64) error {
	if d.reserved(lastToken, h, now, expiry, weight) {
		d.preReserve(lastToken, h, now, expiry, weight) // the next block, in the background
		return nil
	}
	return d.writeReservation(lastToken, h, now, expiry, weight)
}

// reserved is reserve's fast path: the next token, expiry and weight more
// held are within what is durably reserved.
func (d *durable) reserved(lastToken uint64, h weightHeld, now, expiry time.Time, weight int64) bool {
	st := &d.state
	return lastToken < st.TokenCeiling && !expiry.After(st.LeaseHorizon) && expiry.Sub(now) <= st.TTLBound && d.heldWithin(h, weight)
}

// heldWithin reports whether weight more held beside h stays within the
// durable HeldBound (always, when it is not kept).
func (d *durable) heldWithin(h weightHeld, weight int64) bool {
	b := d.state.HeldBound
	return weight == 0 || b < 0 || h.held+weight <= b
}

// exact is the weight the pool's live leases may hold, h, where a
// HeldBound is kept (-1 elsewhere). Once the engine is closed nothing is
// granted or re-adopted any more, held can only fall, and it is an exact
// HeldBound for the final write of a clean stop. Before, the written bound
// stays ahead of it (heldSlack), so that a grant that fits under the
// bound writes nothing.
func (d *durable) exact(h weightHeld) int64 {
	if d.limit == 0 || !h.bounded {
		return -1
	}
	return h.held
}

// heldBound is the HeldBound to write for weight more held beside h: only
// a pool with a concurrency limit and no instances keeps one. It covers
// h, the weight, plus heldSlack (so that a pool filling up writes a few
// times, not at every grant), capped at the limit. It may be below the
// bound written before: the caller holds the pool's lock, so no grant
// comes between the decision and the write, and every grant after it
// keeps within it or writes a higher one first (docs/recovery.md, "The
// held-weight bound follows the weight held").
func (d *durable) heldBound(h weightHeld, weight int64) int64 {
	held := d.exact(h)
	if held < 0 {
		return -1
	}
	need := held + weight
	return max(need, min(need+heldSlack(d.limit), d.limit))
}

// writeReservation is the slow path of reserve.
func (d *durable) writeReservation(lastToken uint64, h weightHeld, now, expiry time.Time, weight int64) error {
	if d.env.persister == nil {
		return nil // unreachable: the reservations are never reached without a Persister
	}
	st := d.state
	block := d.tokenBlock
	tokens := lastToken >= st.TokenCeiling // the next token needs a new block
	if tokens {
		block = d.nextBlock(now)
		st.TokenCeiling = lastToken + block
	}
	st.HeldBound = d.heldBound(h, weight)
	// Leases granted before this write expire by the old horizon: if it
	// has passed, they are over and TTLBound starts again from this TTL;
	// if not, it keeps covering them.
	ttl := expiry.Sub(now)
	if st.LeaseHorizon.After(now) {
		st.TTLBound = max(st.TTLBound, ttl)
	} else {
		st.TTLBound = ttl
	}
	horizon := now.Add(st.TTLBound + d.env.horizonSlack)
	if horizon.After(st.LeaseHorizon) {
		st.LeaseHorizon = horizon
	}
	if err := d.save(d.saved(nil, st), "reserve fencing tokens and lease expiries of pool "+quote(d.host.poolName())); err != nil {
		return err
	}
	if tokens {
		d.lastTokenAt = now.UnixNano()
	}
	d.tokenBlock = block
	return nil
}

// nextBlock is how many tokens a write at now reserves: the block doubles
// while writes come less than tokenBlockPeriod apart, and starts again
// from minTokenBlock after a pause.
func (d *durable) nextBlock(now time.Time) uint64 {
	if d.lastTokenAt != 0 && now.UnixNano()-d.lastTokenAt < int64(tokenBlockPeriod) {
		return min(2*d.tokenBlock, maxTokenBlock)
	}
	return minTokenBlock
}

// recordCleanStop records, once the engine is closed, that the pool holds
// nothing (holds is false: no lease, no rate share, and no recovery window
// still open for ones from before a restart). Its horizons become the
// zero time (none granted), and its live set empty below its last token,
// so that the next start needs no recovery window for it. The next grant
// (or share) passes the zero horizon and so writes a new one before it is
// made, as any grant past the horizon does: a crash after it finds a
// horizon again. A failed write leaves the old record, which is merely
// more cautious.
//
// A pool that holds something gets the changes to its live set not
// written yet written now, and its held-weight bound lowered to what its
// leases may hold, h (exact), so that the next start grants at once
// beside it.
func (d *durable) recordCleanStop(holds bool, h weightHeld) {
	if d.env.persister == nil {
		return
	}
	st := d.state
	if holds {
		exact := d.exact(h)
		if d.live.pending() || (exact >= 0 && exact != st.HeldBound) {
			if exact >= 0 {
				st.HeldBound = exact
			}
			_ = d.save(d.saved(nil, st), "record the released leases and the held weight of pool "+quote(d.host.poolName()))
		}
		return
	}
	if st.LeaseHorizon.IsZero() && st.ShareHorizon.IsZero() {
		return
	}
	// Nothing issued so far is live: no lease up to the last token may be
	// re-adopted after a later restart either.
	st.LeaseHorizon, st.ShareHorizon = time.Time{}, time.Time{}
	if st.HeldBound > 0 {
		st.HeldBound = 0
	}
	d.live.clear() // the mark written is the last token
	_ = d.save(d.saved(nil, st), "record the clean stop of pool "+quote(d.host.poolName()))
}

// poolDurHost is a pool as its durable part sees it (durHost).
type poolDurHost pool

func (h *poolDurHost) lock()   { h.mu.Lock() }
func (h *poolDurHost) unlock() { (*pool)(h).unlock() }

func (h *poolDurHost) record(cfg *PoolConfig) SavedPool {
	if cfg == nil {
		cfg = &h.cfg
	}
	sp := SavedPool{Config: *cfg, CreateTime: h.createTime, UpdateTime: time.Unix(0, h.updateTime).UTC(), Suspended: h.susp.on, State: DurableState{LiveMark: h.lastToken}}
	if cfg.ResourceKind == ResourceActive {
		sp.Resources = h.res.recorded(nil, nil)
	}
	return sp
}

func (h *poolDurHost) heldNow() weightHeld { return h.rec.weightHeld(h.held) }
func (h *poolDurHost) gone() bool          { return h.deleted }
func (h *poolDurHost) poolName() string    { return h.name }

// granted marks token live in the live set: a lease was granted.
func (d *durable) granted(token uint64) {
	if d.env.persister != nil {
		d.live.grant(token)
	}
}

// leaseEnded marks token's lease over in the live set. Only a release, a
// revocation or a resize then writes it (liveChanged): an expiry needs no
// write.
func (d *durable) leaseEnded(token uint64) {
	if d.env.persister != nil {
		d.live.end(token)
	}
}

// resized records in the live set that token's lease now holds weight,
// and writes it: an older receipt, with another weight, is not re-adopted.
func (d *durable) resized(token uint64, weight int64) {
	if d.env.persister != nil {
		d.live.resize(token, weight)
		d.liveChanged()
	}
}

// releaseUnknown ends token's lease, which the engine does not know but
// which may be live from before a restart (the caller checked that token
// may name one), and reports whether the live set had it: released before,
// or ended before the restart, it is not.
func (d *durable) releaseUnknown(token uint64) bool {
	if live, _ := d.live.live(token); !live {
		return false
	}
	d.live.end(token)
	d.liveChanged()
	return true
}
