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
// fails), durable.reserve still writes in the foreground: safety never
// depends on it.
//
// Every write of a pool, foreground or background, goes through its
// durable part's writer: one at a time (writeMu), counted (writes). A
// foreground write holds the pool's lock and records the reservation
// being written in the background too (mergeReservations), so the store
// never goes back; a
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

// save writes saved, its State merged with any reservation being written
// in the background, and on success makes that state the pool's durable
// state. The caller holds the pool's lock. Errors: the Persister's, as
// apierr.ErrStorageFailed saying what was not done.
func (d *durable) save(saved SavedPool, what string) error {
	if d.w.pending != nil {
		saved.State = mergeReservations(saved.State, *d.w.pending)
	}
	d.w.mu.Lock()
	err := d.env.persister.SavePool(saved)
	last := d.w.writes.Add(1)
	d.w.mu.Unlock()
	if err := storageErr(err, what); err != nil {
		d.writeFailed(saved, last)
		return err
	}
	d.state = saved.State
	d.live.written(saved.LiveChunks, saved.liveVers)
	d.heldUnsure = false
	return nil
}

// backgroundWritten takes the outcome err of a background write of saved
// (the pool's write ahead, or its live set's), the pool's write number
// last. Its success puts its reservations in force, and its held-weight
// bound as exactly the one on disk, only if no later write was made or
// decided since: else that one decides (its outcome may be taken first: a
// background write takes the pool's lock after its write; a write ahead
// decided after it carries the reservations in force then, not this
// one's), and this one changes nothing but the live set it wrote and, if
// its bound differs from the one in force, marks the bound to be written
// again (the disk may hold this one).
func (d *durable) backgroundWritten(saved SavedPool, last uint64, err error) {
	if err != nil {
		d.writeFailed(saved, last)
		return
	}
	d.live.written(saved.LiveChunks, saved.liveVers)
	if d.w.writes.Load() != last || d.w.pending != nil {
		if h := saved.State.HeldBound; h >= 0 && h != d.state.HeldBound {
			d.heldUnsure = true
			d.armLower(heldLowerPeriod)
		}
		return
	}
	d.state = mergeReservations(d.state, saved.State)
	if h := saved.State.HeldBound; h >= 0 {
		d.state.HeldBound = h
		d.heldUnsure = false
	}
}

// writeFailed records that the pool's write number last, of saved,
// failed: the live set it carried is still to write, and its held-weight
// bound may have landed all the same (heldWriteFailed), unless a later
// write was made since: that one's outcome, taken under the pool's lock,
// decides what the disk holds (it may have landed, and grants relied on
// its bound).
func (d *durable) writeFailed(saved SavedPool, last uint64) {
	d.live.failed()
	if d.w.writes.Load() == last {
		d.heldWriteFailed(saved.State.HeldBound)
	}
}

// heldWriteFailed records that the last write, of held-weight bound h,
// failed: it may have landed all the same, so grants keep within the lower
// of h and the bound in memory, and the bound is written again (heldHigh)
// once the disk is known to hold neither more nor less.
func (d *durable) heldWriteFailed(h int64) {
	if h < 0 {
		return
	}
	if b := &d.state.HeldBound; *b < 0 || h < *b {
		*b = h
	}
	d.heldUnsure = true
	d.armLower(heldLowerPeriod)
}

// armLower makes lowerHeldBoundLater run after wait, unless it is armed
// already.
func (d *durable) armLower(wait time.Duration) {
	if !d.lowerArmed && d.env.preReserve && !d.env.closed.Load() {
		d.lowerArmed = true
		d.env.clock.AfterFunc(wait, d.lowerHeldBoundLater)
	}
}

// delete forgets the pool on disk, through its writer, recording
// tokenFloor for the pools created after it; without a Persister it does
// nothing.
func (d *durable) delete(tokenFloor uint64) error {
	if d.env.persister == nil {
		return nil
	}
	d.w.mu.Lock()
	err := d.env.persister.DeletePool(d.host.poolName(), tokenFloor)
	d.w.writes.Add(1)
	d.w.mu.Unlock()
	return storageErr(err, "delete pool "+quote(d.host.poolName()))
}

// preReserve starts writing the next reservation in the background if the
// pool has used half of its current one and no such write is in flight.
// It is called on reserve's fast path; without Options.PreReserve it does
// nothing.
func (d *durable) preReserve(lastToken uint64, h weightHeld, now, expiry time.Time, weight int64) {
	if !d.env.preReserve || d.w.pending != nil || d.env.persister == nil || d.env.closed.Load() {
		return // Close waits for writes started before it, and none may start after
	}
	st := d.state
	lowTokens := st.TokenCeiling-lastToken <= d.tokenBlock/2
	lowHorizon := st.LeaseHorizon.Sub(expiry) < d.env.horizonSlack/2
	lowHeld := d.heldLow(h)
	if !lowTokens && !lowHorizon && !lowHeld {
		d.lowerHeldBound(h, now, weight)
		return
	}
	d.startWriteAhead(h, now, lowTokens, lowHeld, -1)
}

// startWriteAhead starts preReserve's background write: apart, so that the
// hot path that writes nothing has a small stack frame (the pool's saved
// form is large).
//
//go:noinline
func (d *durable) startWriteAhead(h weightHeld, now time.Time, lowTokens, lowHeld bool, lower int64) {
	st := d.state
	next := st
	block := d.tokenBlock
	if lowTokens { // the block grows and shrinks as in writeReservation
		block = d.nextBlock(now)
		next.TokenCeiling = st.TokenCeiling + block
	}
	if hz := now.Add(st.TTLBound + d.env.horizonSlack); hz.After(next.LeaseHorizon) {
		next.LeaseHorizon = hz
	}
	switch {
	case lowHeld: // grants may use the old bound until the write lands
		next.HeldBound = max(st.HeldBound, d.heldBound(h, heldAhead(d.limit)))
	case lower >= 0:
		// Grants keep within the lower bound from now on: the disk holds
		// the old one or this one, and whichever write comes next
		// carries at least this one.
		next.HeldBound = d.heldBound(h, lower)
		if next.HeldBound < st.HeldBound { // (after a failed write it may be higher)
			d.state.HeldBound = next.HeldBound
		}
		d.heldLowered = now.UnixNano()
	}
	d.w.pending = &next
	saved := d.saved(nil, next)
	seen := d.w.writes.Load()
	d.env.bg.Add(1)
	go d.writeAhead(saved, seen, lowTokens, lower >= 0, block, now)
}

// writeAhead is the background write of preReserve: saved is the pool as
// it was when the write was decided, after seen writes.
func (d *durable) writeAhead(saved SavedPool, seen uint64, tokens, lowering bool, block uint64, decided time.Time) {
	defer d.env.bg.Done()
	w := &d.w
	w.mu.Lock()
	if w.writes.Load() != seen { // a foreground write went first, with this reservation in it
		w.mu.Unlock()
		d.host.lock()
		w.pending = nil
		d.live.failed() // its snapshot is not written: its unsure ranges are still to write
		if h := saved.State.HeldBound; lowering || (h >= 0 && h != d.state.HeldBound) {
			d.heldUnsure = true // the write that went first may have carried another bound
		}
		d.lowerHeldBound(d.host.heldNow(), d.env.clock.Now(), 0)
		d.host.unlock()
		return
	}
	err := saveLater(d.env.persister, saved)
	last := w.writes.Add(1)
	w.mu.Unlock()

	d.host.lock()
	defer d.host.unlock()
	w.pending = nil
	d.backgroundWritten(saved, last, err) // on failure, reserve writes in the foreground when it must
	if err == nil && tokens {
		d.lastTokenAt = decided.UnixNano()
		d.tokenBlock = block
	}
	d.lowerHeldBound(d.host.heldNow(), d.env.clock.Now(), 0)
}

// heldAhead is how close the held weight may come to the written
// HeldBound, in a pool with a concurrency limit of limit, before the
// background write raises the bound.
func heldAhead(limit int64) int64 { return max(1, limit/16) }

// heldLow reports whether what the pool's leases may hold, h, is within
// heldAhead of the written HeldBound, still below the limit.
func (d *durable) heldLow(h weightHeld) bool {
	b, limit := d.state.HeldBound, d.limit
	return b >= 0 && b < limit && h.held+heldAhead(limit) > b
}

// heldLowerPeriod is the least time between two writes that lower a
// pool's held-weight bound, so that a pool whose held weight swings writes
// a few times a second at most.
const heldLowerPeriod = 500 * time.Millisecond

// heldSlack is how far above the weight held a pool with a concurrency
// limit of limit writes its held-weight bound: a few grants fit under it
// before a write must raise it.
func heldSlack(limit int64) int64 { return max(1, limit/8) }

// heldHigh reports whether the written held-weight bound is more than
// twice heldSlack above what the pool's leases may hold now, h, with
// weight more, or may differ from what is on disk (a write of it failed),
// so that lowering it gives a restarted engine or a successor capacity to
// grant at once.
func (d *durable) heldHigh(h weightHeld, weight int64) bool {
	b, exact := d.state.HeldBound, d.exact(h)
	return b >= 0 && exact >= 0 && (d.heldUnsure || b > exact+weight+2*heldSlack(d.limit))
}

// lowerHeldBound starts a background write that lowers the held-weight
// bound to what the pool's leases may hold, h, plus heldSlack when it is
// well above it (heldHigh): at once, unless a bound was lowered less than
// heldLowerPeriod ago (a timer then tries again at the period's end) or a
// write is in flight (its end tries again). From the moment the write is
// decided, grants keep within the new bound: one that would pass it writes
// a higher bound first, as any grant past the bound does. It is called
// when the weight held may have fallen: on the grant and renewal path,
// when a lease ends, when a recovery window ends.
func (d *durable) lowerHeldBound(h weightHeld, now time.Time, weight int64) {
	if !d.env.preReserve || d.env.persister == nil || d.env.closed.Load() || d.w.pending != nil || !d.heldHigh(h, weight) || d.host.gone() {
		return
	}
	if wait := heldLowerPeriod - now.Sub(unixNano(d.heldLowered)); wait > 0 {
		d.armLower(wait)
		return
	}
	d.startWriteAhead(h, now, false, false, weight)
}

// lowerHeldBoundLater is lowerHeldBound's timer.
func (d *durable) lowerHeldBoundLater() {
	d.host.lock()
	defer d.host.unlock()
	d.lowerArmed = false
	d.lowerHeldBound(d.host.heldNow(), d.env.clock.Now(), 0)
}
