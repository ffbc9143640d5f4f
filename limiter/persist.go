package limiter

import (
	"errors"
	"sort"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Persister makes pool definitions, and the little state the engine needs
// to stay safe across a restart, durable. The server's store implements it;
// an Engine without one (Options.Persister nil) keeps everything in memory.
//
// The engine calls a Persister under the lock of the pool concerned (and,
// for a new pool, under the engine's creation lock), so the calls for one
// pool are serialized and reach the Persister in the order their effects
// become visible. A change is made visible only after the call returned
// nil: when it fails, the engine reports the error and leaves the pool as it
// was. A Persister must therefore not call back into the engine, and should
// return only once the write is durable (an fsync'ed commit).
type Persister interface {
	// SavePool durably records a pool: its configuration when it is
	// created or updated, and its DurableState whenever the engine moves
	// the state forward.
	SavePool(SavedPool) error
	// DeletePool durably forgets the named pool and records tokenFloor:
	// no pool may issue a fencing token at or below it again, even under
	// the same name. The Persister keeps the highest floor it was given
	// and hands it back after a restart (to Engine.RaiseTokenFloor).
	DeletePool(name string, tokenFloor uint64) error
}

// LaterPersister is a Persister that can make the writes no caller waits
// for (the reservations written ahead, the ended leases) wait a little,
// to share one commit with other pools' writes. The engine gives those
// writes to SavePoolLater, with the same promise as SavePool: it returns
// once the write is durable, or fails and changes nothing.
type LaterPersister interface {
	Persister
	SavePoolLater(SavedPool) error
}

// saveLater is a background write of saved: through SavePoolLater when the
// Persister has one.
func (e *Engine) saveLater(saved SavedPool) error {
	if lp, ok := e.persister.(LaterPersister); ok {
		return lp.SavePoolLater(saved)
	}
	return e.persister.SavePool(saved)
}

// SavedPool is a pool as a Persister records it and Engine.RestorePool
// takes it back after a restart.
type SavedPool struct {
	// Config with defaults filled in.
	Config PoolConfig
	// CreateTime and UpdateTime by the engine's clock.
	CreateTime time.Time
	UpdateTime time.Time
	// State is what a restarted engine needs to stay safe.
	State DurableState
	// Suspended: an operator suspended the pool (SuspendPool) and has not
	// resumed it; a restored pool stays suspended.
	Suspended bool
	// Resources are an active pool's instances, in id order, less those
	// being removed (see AddResources); nil for other pools: a passive
	// pool's instances come back with their providers.
	Resources []Resource
	// LiveChunks are the chunks of the pool's live set: to SavePool, those
	// that changed since the pool's last write (a chunk with Delete set is
	// to be forgotten); from the store to RestorePool, every chunk it
	// holds. See liveSet.
	LiveChunks []LiveChunk
	liveVers   []liveVer // the versions of LiveChunks in memory, for liveSet.written
}

// DurableState is the per-pool state that lets a restarted engine keep its
// promises without a disk write per grant. The engine writes it ahead of
// time, in blocks, and only moves it forward:
//   - no fencing token above TokenCeiling has been issued, so a restarted
//     engine continues above it;
//   - no live lease expires after LeaseHorizon (the zero time: no lease was
//     ever granted), so a restarted engine knows when every lease granted
//     before the restart is over;
//   - no live lease was granted or last renewed with a TTL above TTLBound,
//     so it is also over TTLBound after the restart.
type DurableState struct {
	TokenCeiling uint64
	LeaseHorizon time.Time
	TTLBound     time.Duration
	// ShareHorizon: no rate share granted or refreshed before a restart
	// is live after it (the zero time: none ever was), so a restarted
	// engine knows until when shares it does not know may still be
	// spending the pool's rate.
	ShareHorizon time.Time
	// ShareTTLBound: no rate share was granted or refreshed with a TTL
	// above it, so none from before a restart is live after restart +
	// ShareTTLBound either. It only grows.
	ShareTTLBound time.Duration
	// EffectiveConcurrency and EffectiveRate are the effective limits
	// adaptive control lowered the pool to (0: not lowered), so that a
	// restarted engine does not hand a protected system in trouble its
	// full configured limits at once. Unlike the
	// fields above they are soft: written after the change, best effort.
	EffectiveConcurrency int64
	EffectiveRate        float64
	// LiveMark: the last fencing token issued when the record was written
	// (at first, the token floor the pool was created above: tokens of an
	// earlier pool of the same name). A lease with a token at or below it
	// may be live after a restart only if the pool's live set
	// (SavedPool.LiveChunks) says so, or, where no chunk was written, if
	// its token lies in Unsure; see liveSet.
	LiveMark uint64
	// Unsure are ranges of tokens issued before a restart whose leases may
	// still be live, until that restart's recovery window ends.
	Unsure []TokenRange
	// HeldBound: live leases hold no more weight than it, counting those
	// from before a restart not re-adopted yet, so that a restarted
	// engine grants at once from the rest of the concurrency limit. It is
	// written ahead like TokenCeiling, for a pool with a concurrency limit
	// and no instances; negative means unknown (not kept, or a record from
	// before it was), and then a restarted engine waits out the whole
	// recovery window.
	HeldBound int64
	// LegacyEnded, only in a record written before the live set was kept
	// (whose LiveMark is its readopt floor, and no chunk), are the leases
	// released or revoked before their expiry, which RestorePool marks
	// ended. It is never written.
	LegacyEnded []EndedLease
}

// EndedLease is a lease released or revoked before its expiry, as records
// written before the live set was kept list them.
type EndedLease struct {
	Token   uint64
	Expiry  time.Time
	Revoked bool
}

// Tuning of the writes ahead.
const (
	// DefaultHorizonSlack is how far past the longest expiry in use the
	// engine moves a pool's lease horizon when a grant or renewal would
	// pass it, when Options.HorizonSlack is 0: a busy pool writes its
	// horizon about once per slack.
	DefaultHorizonSlack = 30 * time.Second
	// minTokenBlock and maxTokenBlock bound how many fencing tokens one
	// write reserves. The block doubles while writes come less than
	// tokenBlockPeriod apart, so a busy pool writes about once a period.
	minTokenBlock    = 1024
	maxTokenBlock    = 1 << 20
	tokenBlockPeriod = time.Second
)

// noPersistCeiling and noPersistHorizon are a pool's reservations when the
// engine has no Persister: they are never reached, so the hot path never
// calls reserveLocked.
var noPersistHorizon = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

const noPersistCeiling = ^uint64(0)

// durable is a pool's view of its DurableState. It is guarded by the pool's
// mutex.
type durable struct {
	state       DurableState
	tokenBlock  uint64 // tokens the next write reserves
	lastTokenAt int64  // when a write last had to move TokenCeiling (Unix ns; 0: never)
	flushing    bool   // a background write of the live set is running
	// liveFlushed is when the last background write of the live set began.
	liveFlushed time.Time
	live        liveSet
	// heldLowered is when a write lowering HeldBound was last decided,
	// lowerArmed says a timer will try to lower it again
	// (lowerHeldBoundLocked), and heldUnsure that a write of it failed:
	// what is on disk may differ from state.HeldBound (heldWriteFailedLocked).
	heldLowered time.Time
	lowerArmed  bool
	heldUnsure  bool
	w           writer // every write of the pool goes through it
}

// NewSavedPool returns what CreatePool would record for cfg at now: cfg
// with defaults filled in and validated, and a DurableState that reserves
// a first block of fencing tokens. The server uses it to seed a store.
// Errors: apierr.ErrInvalidArgument.
func NewSavedPool(cfg PoolConfig, now time.Time) (SavedPool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return SavedPool{}, err
	}
	return SavedPool{
		Config:     cfg,
		CreateTime: now,
		UpdateTime: now,
		State:      DurableState{TokenCeiling: minTokenBlock},
	}, nil
}

// initDurableLocked sets up p's reservations: the ones of st with a
// Persister, unreachable ones without.
func (p *pool) initDurableLocked(st DurableState) {
	if p.e.persister == nil {
		p.dur = durable{state: DurableState{TokenCeiling: noPersistCeiling, LeaseHorizon: noPersistHorizon, TTLBound: MaxLeaseTTLLimit, ShareHorizon: noPersistHorizon, ShareTTLBound: MaxLeaseTTLLimit, HeldBound: -1}}
		return
	}
	p.dur = durable{state: st, tokenBlock: minTokenBlock}
}

// savedLocked returns p as the Persister records it, with state st.
func (p *pool) savedLocked(cfg PoolConfig, st DurableState) SavedPool {
	sp := SavedPool{Config: cfg, CreateTime: p.createTime, UpdateTime: p.updateTime, Suspended: p.susp.on,
		Resources: p.durableResourcesLocked(nil, nil)}
	st.LiveMark, st.LegacyEnded = p.lastToken, nil
	st.Unsure, sp.LiveChunks, sp.liveVers = p.dur.live.snapshot()
	sp.State = st
	return sp
}

// durableResourcesLocked returns what an active pool records of its
// instances once add are added and the ids remove removed: every
// instance not being removed, in id order; nil for other pools.
func (p *pool) durableResourcesLocked(add []Resource, remove []string) []Resource {
	if p.cfg.ResourceKind != ResourceActive {
		return nil
	}
	gone := make(map[string]struct{}, len(remove))
	for _, id := range remove {
		gone[id] = struct{}{}
	}
	out := make([]Resource, 0, len(p.res.byID)+len(add))
	for id, in := range p.res.byID {
		if _, g := gone[id]; !g && !in.removing {
			out = append(out, in.Resource)
		}
	}
	out = append(out, add...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// persistResourcesLocked records an active pool's instances once add are
// added and the ids remove removed, before the change becomes visible.
func (p *pool) persistResourcesLocked(add []Resource, remove []string) error {
	if p.e.persister == nil {
		return nil
	}
	saved := p.savedLocked(p.cfg, p.dur.state)
	saved.Resources = p.durableResourcesLocked(add, remove)
	return p.saveLocked(saved, "change the instances of pool "+quote(p.name))
}

// persistCreateLocked records the new pool p before it becomes visible.
func (p *pool) persistCreateLocked() error {
	if p.e.persister == nil {
		return nil
	}
	return p.saveLocked(p.savedLocked(p.cfg, p.dur.state), "create pool "+quote(p.name))
}

// persistConfigLocked records cfg, which UpdatePool is about to make live.
// The DurableState does not change: TTLBound follows the TTLs granted, not
// MaxLeaseTTL, so lowering the maximum leaves it covering older leases.
func (p *pool) persistConfigLocked(cfg PoolConfig, now time.Time) error {
	if p.e.persister == nil {
		return nil
	}
	saved := p.savedLocked(cfg, p.dur.state)
	saved.UpdateTime = now
	return p.saveLocked(saved, "update pool "+quote(p.name))
}

// persistDeleteLocked forgets p on disk before it is deleted, recording
// tokenFloor for the pools created after it.
func (p *pool) persistDeleteLocked(tokenFloor uint64) error {
	if p.e.persister == nil {
		return nil
	}
	return p.deleteLocked(tokenFloor)
}

// reserveLocked makes sure that the next fencing token, a lease granted
// or renewed at now to expire at expiry, and weight more held (0 for a
// renewal) are within what is durably reserved, writing new reservations
// first if they are not. It is called before every grant, renewal and
// re-adoption; the check is four comparisons, and a write happens only
// when the next token would pass TokenCeiling (which then moves a block of
// tokens past the last issued), the TTL would pass TTLBound (which then
// grows to it), expiry would pass LeaseHorizon, or the held weight would
// pass HeldBound (which then grows: heldBoundLocked); every write also
// moves LeaseHorizon to now + TTLBound + slack if that is later. It fails
// with apierr.ErrStorageFailed when the write fails; the caller must then not
// grant.
//
// TTLBound follows the TTLs in use, not MaxLeaseTTL, so that the recovery
// window after a restart is as long as the leases really are (15s by
// default), not as long as they could be (5m by default).
func (p *pool) reserveLocked(now, expiry time.Time, weight int64) error {
	st := &p.dur.state
	if p.lastToken < st.TokenCeiling && !expiry.After(st.LeaseHorizon) && expiry.Sub(now) <= st.TTLBound && p.heldWithinLocked(weight) {
		p.preReserveLocked(now, expiry, weight) // the next block, in the background
		return nil
	}
	return p.writeReservationLocked(now, expiry, weight)
}

// heldWithinLocked reports whether weight more held stays within the
// durable HeldBound (always, when it is not kept).
func (p *pool) heldWithinLocked(weight int64) bool {
	b := p.dur.state.HeldBound
	return weight == 0 || b < 0 || p.held+weight+p.rec.unknownHeld() <= b
}

// heldBoundLocked is the HeldBound to write for weight more held: only a
// pool with a concurrency limit and no instances keeps one. It covers the
// weight held, the weight, and the leases from before a restart not
// re-adopted yet, plus heldSlack (so that a pool filling up writes a few
// times, not at every grant), capped at the limit. It may be below the
// bound written before: the caller holds the pool's lock, so no grant
// comes between the decision and the write, and every grant after it
// keeps within it or writes a higher one first (docs/recovery.md, "The
// held-weight bound follows the weight held").
func (p *pool) heldBoundLocked(weight int64) int64 {
	held, limit := p.exactHeldLocked(), p.cfg.ConcurrencyLimit
	if held < 0 {
		return -1
	}
	need := held + weight
	return max(need, min(need+heldSlack(limit), limit))
}

// writeReservationLocked is the slow path of reserveLocked.
func (p *pool) writeReservationLocked(now, expiry time.Time, weight int64) error {
	if p.e.persister == nil {
		return nil // unreachable: the reservations are never reached without a Persister
	}
	st := p.dur.state
	block := p.dur.tokenBlock
	tokens := p.lastToken >= st.TokenCeiling // the next token needs a new block
	if tokens {
		if p.dur.lastTokenAt != 0 && now.UnixNano()-p.dur.lastTokenAt < int64(tokenBlockPeriod) {
			block = min(2*block, maxTokenBlock)
		} else {
			block = minTokenBlock
		}
		st.TokenCeiling = p.lastToken + block
	}
	st.HeldBound = p.heldBoundLocked(weight)
	// Leases granted before this write expire by the old horizon: if it
	// has passed, they are over and TTLBound starts again from this TTL;
	// if not, it keeps covering them.
	ttl := expiry.Sub(now)
	if st.LeaseHorizon.After(now) {
		st.TTLBound = max(st.TTLBound, ttl)
	} else {
		st.TTLBound = ttl
	}
	horizon := now.Add(st.TTLBound + p.e.horizonSlack)
	if horizon.After(st.LeaseHorizon) {
		st.LeaseHorizon = horizon
	}
	if err := p.saveLocked(p.savedLocked(p.cfg, st), "reserve fencing tokens and lease expiries of pool "+quote(p.name)); err != nil {
		return err
	}
	if tokens {
		p.dur.lastTokenAt = now.UnixNano()
	}
	p.dur.tokenBlock = block
	return nil
}

// recordCleanStopLocked records, once the engine is closed, that p holds
// nothing: no lease, no rate share, and no recovery window still open for
// ones from before a restart. Its horizons become the zero time (none
// granted), and its live set empty below its last token, so that the next start
// needs no recovery window for it. The
// next grant (or share) passes the zero horizon and so writes a new one
// before it is made, as any grant past the horizon does: a crash after it
// finds a horizon again. A failed write leaves the old record, which is
// merely more cautious.
//
// A pool that holds something gets the changes to its live set not
// written yet written now, and its held-weight bound lowered to the weight
// held (exactHeldLocked), so that the next start grants at once beside it.
func (p *pool) recordCleanStopLocked() {
	if p.e.persister == nil || p.deleted {
		return
	}
	st := p.dur.state
	if len(p.leases) > 0 || p.held > 0 || p.recoveringLocked() || len(p.shr.byID) > 0 || !p.shr.rec.until.IsZero() {
		exact := p.exactHeldLocked()
		if p.dur.live.pending() || (exact >= 0 && exact != st.HeldBound) {
			if exact >= 0 {
				st.HeldBound = exact
			}
			_ = p.saveLocked(p.savedLocked(p.cfg, st), "record the released leases and the held weight of pool "+quote(p.name))
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
	p.dur.live.clear() // the mark written is the last token
	_ = p.saveLocked(p.savedLocked(p.cfg, st), "record the clean stop of pool "+quote(p.name))
}

// exactHeldLocked is the weight the pool's live leases may hold now: the
// weight held, and what leases from before a restart not re-adopted yet
// may hold (-1 where no HeldBound is kept). Once the engine is closed
// nothing is granted or re-adopted any more, held can only fall, and it
// is an exact HeldBound for the final write of a clean stop. Before, the
// written bound stays ahead of it (heldSlack), so that a grant that fits
// under the bound writes nothing.
func (p *pool) exactHeldLocked() int64 {
	if p.cfg.ConcurrencyLimit == 0 || p.res != nil || p.rec.unboundedHeld() {
		return -1
	}
	return p.held + p.rec.unknownHeld()
}

// storageErr turns a Persister's error into apierr.ErrStorageFailed, saying what
// was not done. A nil error stays nil; an *apierr.Error is kept.
func storageErr(err error, what string) error {
	if err == nil {
		return nil
	}
	var e *apierr.Error
	if errors.As(err, &e) {
		return e
	}
	return errorf(apierr.ErrStorageFailed, "could not %s durably: %v; nothing was changed; retry, and check the server's data directory and disk", what, err)
}
