package limiter

import (
	"errors"
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

// saveLater is a background write of saved to ps: through SavePoolLater
// when ps has one.
func saveLater(ps Persister, saved SavedPool) error {
	if lp, ok := ps.(LaterPersister); ok {
		return lp.SavePoolLater(saved)
	}
	return ps.SavePool(saved)
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
// writes.
var noPersistHorizon = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

const noPersistCeiling = ^uint64(0)

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
