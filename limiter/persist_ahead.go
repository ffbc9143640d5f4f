package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// This file keeps the fsync of reservations off the grant path. A busy
// pool moves its fencing-token ceiling and lease horizon forward about
// once a second; with Options.PreReserve the engine writes
// the next block in the background when a pool has used half of the
// current one, so grants find it written and never wait for the disk
// while holding the pool's lock. When the background write is late (or
// fails), reserveLocked still writes in the foreground: safety never
// depends on it.
//
// Every write of a pool, foreground or background, goes through its
// writer: one at a time (writeMu), counted (writes). A foreground write
// holds the pool's lock and records the reservation being written in the
// background too (mergeReservations), so the store never goes back; a
// background write whose snapshot an intervening foreground write made
// stale (the count moved) is dropped, as the foreground one covered it.
// The background writer never holds the pool's lock while it waits for
// writeMu or writes, so the two cannot deadlock.

// writer serializes a pool's writes. Its zero value is ready.
type writer struct {
	mu      sync.Mutex    // held during each Persister call
	writes  atomic.Uint64 // Persister calls made, for a background write to see it is stale
	pending *DurableState // the reservation being written in the background; guarded by the pool's mutex
}

// mergeReservations returns a with each reservation of b that goes
// further: reservations only move forward, so recording the later one is
// always safe (it only skips more tokens, or waits longer, after a
// restart). The fields that are not reservations are a's.
func mergeReservations(a, b DurableState) DurableState {
	a.TokenCeiling = max(a.TokenCeiling, b.TokenCeiling)
	if b.LeaseHorizon.After(a.LeaseHorizon) {
		a.LeaseHorizon = b.LeaseHorizon
	}
	a.TTLBound = max(a.TTLBound, b.TTLBound)
	if b.ShareHorizon.After(a.ShareHorizon) {
		a.ShareHorizon = b.ShareHorizon
	}
	a.ShareTTLBound = max(a.ShareTTLBound, b.ShareTTLBound)
	a.ReadoptFloor = max(a.ReadoptFloor, b.ReadoptFloor)
	a.HeldBound = max(a.HeldBound, b.HeldBound)
	return a
}

// saveLocked writes saved, its State merged with any reservation being
// written in the background, and on success makes that state the pool's
// durable state. The caller holds the pool's lock. Errors: the
// Persister's, as ErrStorageFailed saying what was not done.
func (p *pool) saveLocked(saved SavedPool, what string) error {
	if p.dur.w.pending != nil {
		saved.State = mergeReservations(saved.State, *p.dur.w.pending)
	}
	p.dur.w.mu.Lock()
	err := p.e.persister.SavePool(saved)
	p.dur.w.writes.Add(1)
	p.dur.w.mu.Unlock()
	if err := storageErr(err, what); err != nil {
		return err
	}
	p.dur.state = saved.State
	p.dur.endedDirty = false // the write carried every ended lease
	return nil
}

// deleteLocked forgets the pool on disk, through the pool's writer.
func (p *pool) deleteLocked(tokenFloor uint64) error {
	p.dur.w.mu.Lock()
	err := p.e.persister.DeletePool(p.name, tokenFloor)
	p.dur.w.writes.Add(1)
	p.dur.w.mu.Unlock()
	return storageErr(err, "delete pool "+quote(p.name))
}

// preReserveLocked starts writing the next reservation in the background
// if the pool has used half of its current one and no such write is in
// flight. It is called on reserveLocked's fast path; without
// Options.PreReserve it does nothing.
func (p *pool) preReserveLocked(now, expiry time.Time) {
	if !p.e.preReserve || p.dur.w.pending != nil || p.e.persister == nil || p.e.closed.Load() {
		return // Close waits for writes started before it, and none may start after
	}
	st := p.dur.state
	lowTokens := st.TokenCeiling-p.lastToken <= p.dur.tokenBlock/2
	lowHorizon := st.LeaseHorizon.Sub(expiry) < p.e.horizonSlack/2
	lowHeld := p.heldLowLocked()
	if !lowTokens && !lowHorizon && !lowHeld {
		return
	}
	p.startWriteAheadLocked(now, lowTokens, lowHeld)
}

// startWriteAheadLocked starts preReserveLocked's background write: apart,
// so that the hot path that writes nothing has a small stack frame (the
// pool's saved form is large).
//
//go:noinline
func (p *pool) startWriteAheadLocked(now time.Time, lowTokens, lowHeld bool) {
	st := p.dur.state
	next := st
	block := p.dur.tokenBlock
	if lowTokens { // the block grows and shrinks as in writeReservationLocked
		if p.dur.lastTokenAt != 0 && now.UnixNano()-p.dur.lastTokenAt < int64(tokenBlockPeriod) {
			block = min(2*block, maxTokenBlock)
		} else {
			block = minTokenBlock
		}
		next.TokenCeiling = st.TokenCeiling + block
	}
	if h := now.Add(st.TTLBound + p.e.horizonSlack); h.After(next.LeaseHorizon) {
		next.LeaseHorizon = h
	}
	if lowHeld { // only ever raised here: grants may use the old bound until the write lands
		next.HeldBound = max(st.HeldBound, p.heldBoundLocked(st, now, heldAhead(p.cfg.ConcurrencyLimit)))
	}
	p.dur.w.pending = &next
	saved := p.savedLocked(p.cfg, next)
	seen := p.dur.w.writes.Load()
	p.e.bg.Add(1)
	go p.writeAhead(saved, seen, lowTokens, block, now)
}

// writeAhead is the background write of preReserveLocked: saved is the
// pool as it was when the write was decided, after seen writes.
func (p *pool) writeAhead(saved SavedPool, seen uint64, tokens bool, block uint64, decided time.Time) {
	defer p.e.bg.Done()
	w := &p.dur.w
	w.mu.Lock()
	if w.writes.Load() != seen { // a foreground write went first, with this reservation in it
		w.mu.Unlock()
		p.mu.Lock()
		w.pending = nil
		p.unlock()
		return
	}
	err := p.e.saveLater(saved)
	w.writes.Add(1)
	w.mu.Unlock()

	p.mu.Lock()
	defer p.unlock()
	w.pending = nil
	if err != nil {
		return // reserveLocked writes in the foreground when it must, and reports its error
	}
	p.dur.state = mergeReservations(p.dur.state, saved.State)
	if tokens {
		p.dur.lastTokenAt = decided.UnixNano()
		p.dur.tokenBlock = block
	}
}

// heldAhead is how close the held weight may come to the written
// HeldBound, in a pool with a concurrency limit of limit, before the
// background write raises the bound.
func heldAhead(limit int64) int64 { return max(1, limit/16) }

// heldLowLocked reports whether the held weight (with what leases from
// before a restart may hold) is within heldAhead of the written
// HeldBound, still below the limit.
func (p *pool) heldLowLocked() bool {
	b, limit := p.dur.state.HeldBound, p.cfg.ConcurrencyLimit
	return b >= 0 && b < limit && p.res == nil && p.held+p.rec.unknownHeld()+heldAhead(limit) > b
}
