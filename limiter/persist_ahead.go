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
	a.HeldBound = max(a.HeldBound, b.HeldBound)
	return a
}

// saveLocked writes saved, its State merged with any reservation being
// written in the background, and on success makes that state the pool's
// durable state. The caller holds the pool's lock. Errors: the
// Persister's, as apierr.ErrStorageFailed saying what was not done.
func (p *pool) saveLocked(saved SavedPool, what string) error {
	if p.dur.w.pending != nil {
		saved.State = mergeReservations(saved.State, *p.dur.w.pending)
	}
	p.dur.w.mu.Lock()
	err := p.e.persister.SavePool(saved)
	last := p.dur.w.writes.Add(1)
	p.dur.w.mu.Unlock()
	if err := storageErr(err, what); err != nil {
		p.writeFailedLocked(saved, last)
		return err
	}
	p.dur.state = saved.State
	p.dur.live.written(saved.LiveChunks, saved.liveVers)
	p.dur.heldUnsure = false
	return nil
}

// backgroundWrittenLocked takes the outcome err of a background write of
// saved (the pool's write ahead, or its live set's), the pool's write
// number last. Its success puts its reservations in force, and its
// held-weight bound as exactly the one on disk, only if no later write was
// made or decided since: else that one decides (its outcome may be taken
// first: a background write takes the pool's lock after its write; a
// write ahead decided after it carries the reservations in force then,
// not this one's), and this one changes nothing but the live set it wrote
// and, if its bound differs from the one in force, marks the bound to be
// written again (the disk may hold this one).
func (p *pool) backgroundWrittenLocked(saved SavedPool, last uint64, err error) {
	if err != nil {
		p.writeFailedLocked(saved, last)
		return
	}
	p.dur.live.written(saved.LiveChunks, saved.liveVers)
	if p.dur.w.writes.Load() != last || p.dur.w.pending != nil {
		if h := saved.State.HeldBound; h >= 0 && h != p.dur.state.HeldBound {
			p.dur.heldUnsure = true
			p.armLowerLocked(heldLowerPeriod)
		}
		return
	}
	p.dur.state = mergeReservations(p.dur.state, saved.State)
	if h := saved.State.HeldBound; h >= 0 {
		p.dur.state.HeldBound = h
		p.dur.heldUnsure = false
	}
}

// writeFailedLocked records that the pool's write number last, of saved,
// failed: the live set it carried is still to write, and its held-weight
// bound may have landed all the same (heldWriteFailedLocked), unless a
// later write was made since: that one's outcome, taken under the pool's
// lock, decides what the disk holds (it may have landed, and grants relied
// on its bound).
func (p *pool) writeFailedLocked(saved SavedPool, last uint64) {
	p.dur.live.failed()
	if p.dur.w.writes.Load() == last {
		p.heldWriteFailedLocked(saved.State.HeldBound)
	}
}

// heldWriteFailedLocked records that the last write, of held-weight bound
// h, failed: it may have landed all the same, so grants keep within the
// lower of h and the bound in memory, and the bound is written again
// (heldHighLocked) once the disk is known to hold neither more nor less.
func (p *pool) heldWriteFailedLocked(h int64) {
	if h < 0 {
		return
	}
	if b := &p.dur.state.HeldBound; *b < 0 || h < *b {
		*b = h
	}
	p.dur.heldUnsure = true
	p.armLowerLocked(heldLowerPeriod)
}

// armLowerLocked makes lowerHeldBoundLater run after wait, unless it is
// armed already.
func (p *pool) armLowerLocked(wait time.Duration) {
	if !p.dur.lowerArmed && p.e.preReserve && !p.e.closed.Load() {
		p.dur.lowerArmed = true
		p.e.clock.AfterFunc(wait, p.lowerHeldBoundLater)
	}
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
func (p *pool) preReserveLocked(now, expiry time.Time, weight int64) {
	if !p.e.preReserve || p.dur.w.pending != nil || p.e.persister == nil || p.e.closed.Load() {
		return // Close waits for writes started before it, and none may start after
	}
	st := p.dur.state
	lowTokens := st.TokenCeiling-p.lastToken <= p.dur.tokenBlock/2
	lowHorizon := st.LeaseHorizon.Sub(expiry) < p.e.horizonSlack/2
	lowHeld := p.heldLowLocked()
	if !lowTokens && !lowHorizon && !lowHeld {
		p.lowerHeldBoundLocked(now, weight)
		return
	}
	p.startWriteAheadLocked(now, lowTokens, lowHeld, -1)
}

// startWriteAheadLocked starts preReserveLocked's background write: apart,
// so that the hot path that writes nothing has a small stack frame (the
// pool's saved form is large).
//
//go:noinline
func (p *pool) startWriteAheadLocked(now time.Time, lowTokens, lowHeld bool, lower int64) {
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
	switch {
	case lowHeld: // grants may use the old bound until the write lands
		next.HeldBound = max(st.HeldBound, p.heldBoundLocked(heldAhead(p.cfg.ConcurrencyLimit)))
	case lower >= 0:
		// Grants keep within the lower bound from now on: the disk holds
		// the old one or this one, and whichever write comes next
		// carries at least this one.
		next.HeldBound = p.heldBoundLocked(lower)
		if next.HeldBound < st.HeldBound { // (after a failed write it may be higher)
			p.dur.state.HeldBound = next.HeldBound
		}
		p.dur.heldLowered = now
	}
	p.dur.w.pending = &next
	saved := p.savedLocked(p.cfg, next)
	seen := p.dur.w.writes.Load()
	p.e.bg.Add(1)
	go p.writeAhead(saved, seen, lowTokens, lower >= 0, block, now)
}

// writeAhead is the background write of preReserveLocked: saved is the
// pool as it was when the write was decided, after seen writes.
func (p *pool) writeAhead(saved SavedPool, seen uint64, tokens, lowering bool, block uint64, decided time.Time) {
	defer p.e.bg.Done()
	w := &p.dur.w
	w.mu.Lock()
	if w.writes.Load() != seen { // a foreground write went first, with this reservation in it
		w.mu.Unlock()
		p.mu.Lock()
		w.pending = nil
		p.dur.live.failed() // its snapshot is not written: its unsure ranges are still to write
		if h := saved.State.HeldBound; lowering || (h >= 0 && h != p.dur.state.HeldBound) {
			p.dur.heldUnsure = true // the write that went first may have carried another bound
		}
		p.lowerHeldBoundLocked(p.e.clock.Now(), 0)
		p.unlock()
		return
	}
	err := p.e.saveLater(saved)
	last := w.writes.Add(1)
	w.mu.Unlock()

	p.mu.Lock()
	defer p.unlock()
	w.pending = nil
	p.backgroundWrittenLocked(saved, last, err) // on failure, reserveLocked writes in the foreground when it must
	if err == nil && tokens {
		p.dur.lastTokenAt = decided.UnixNano()
		p.dur.tokenBlock = block
	}
	p.lowerHeldBoundLocked(p.e.clock.Now(), 0)
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

// heldLowerPeriod is the least time between two writes that lower a
// pool's held-weight bound, so that a pool whose held weight swings writes
// a few times a second at most.
const heldLowerPeriod = 500 * time.Millisecond

// heldSlack is how far above the weight held a pool with a concurrency
// limit of limit writes its held-weight bound: a few grants fit under it
// before a write must raise it.
func heldSlack(limit int64) int64 { return max(1, limit/8) }

// heldHighLocked reports whether the written held-weight bound is more
// than twice heldSlack above the weight live leases may hold now
// (exactHeldLocked), or may differ from what is on disk (a write of it
// failed), so that lowering it gives a restarted engine or a successor
// capacity to grant at once.
func (p *pool) heldHighLocked(weight int64) bool {
	b, exact := p.dur.state.HeldBound, p.exactHeldLocked()
	return b >= 0 && exact >= 0 && (p.dur.heldUnsure || b > exact+weight+2*heldSlack(p.cfg.ConcurrencyLimit))
}

// lowerHeldBoundLocked starts a background write that lowers the
// held-weight bound to the weight held plus heldSlack when it is well
// above it (heldHighLocked): at once, unless a bound was lowered less than
// heldLowerPeriod ago (a timer then tries again at the period's end) or a
// write is in flight (its end tries again). From the moment the write is
// decided, grants keep within the new bound: one
// that would pass it writes a higher bound first, as any grant past the
// bound does. It is called when the weight held may have fallen: on the
// grant and renewal path, when a lease ends, when a recovery window ends.
func (p *pool) lowerHeldBoundLocked(now time.Time, weight int64) {
	if !p.e.preReserve || p.e.persister == nil || p.e.closed.Load() || p.deleted || p.dur.w.pending != nil || !p.heldHighLocked(weight) {
		return
	}
	if wait := heldLowerPeriod - now.Sub(p.dur.heldLowered); wait > 0 {
		p.armLowerLocked(wait)
		return
	}
	p.startWriteAheadLocked(now, false, false, weight)
}

// lowerHeldBoundLater is lowerHeldBoundLocked's timer.
func (p *pool) lowerHeldBoundLater() {
	p.mu.Lock()
	defer p.unlock()
	p.dur.lowerArmed = false
	p.lowerHeldBoundLocked(p.e.clock.Now(), 0)
}
