package limiter

import "time"

// This file keeps a restarted engine from re-adopting a lease that was
// released or revoked before the restart (docs/recovery.md). An expired
// lease needs nothing: a re-adopting renew must show the expiry the lease
// was last granted (Readopt.Expiry, signed by the server), and one that has
// passed is refused. A released or revoked lease may still show an expiry
// ahead, so the engine records it in DurableState.Ended, written in the
// background, never on the grant or release path: at once when the pool
// wrote none in the last endedFlushDelay, else a batch at the end of it. A
// lease released less than one write (or, in a busy pool, endedFlushDelay
// plus one write) before a crash may still be re-adopted: see
// docs/recovery.md for why that is the one case a write per release would
// be needed to close.

// endedFlushDelay is the least time between two background writes of a
// pool's ended leases, so that in a busy pool one write carries many.
const endedFlushDelay = 100 * time.Millisecond

// maxEnded bounds a pool's recorded ended leases. Past it, the oldest half
// is folded into DurableState.ReadoptFloor: refusing to re-adopt a lease
// is always safe (its holder is told to stop), so losing their detail only
// costs the re-adoption of older live leases.
const maxEnded = 1 << 14

// recordEndedLocked records that the lease token, granted until expiry,
// was released (or revoked), and starts writing it in the background.
func (p *pool) recordEndedLocked(token uint64, expiry time.Time, revoked bool) {
	if p.e.persister == nil {
		return
	}
	st := &p.dur.state
	if len(st.Ended) >= maxEnded {
		half := st.Ended[len(st.Ended)/2:]
		for _, e := range st.Ended[:len(st.Ended)/2] {
			st.ReadoptFloor = max(st.ReadoptFloor, e.Token)
		}
		st.Ended = append([]EndedLease(nil), half...)
	}
	st.Ended = append(st.Ended, EndedLease{Token: token, Expiry: expiry, Revoked: revoked})
	p.dur.endedDirty = true
	if p.dur.flushing {
		return
	}
	p.dur.flushing = true
	p.e.clock.AfterFunc(max(0, endedFlushDelay-p.e.clock.Now().Sub(p.dur.endedFlushed)), p.flushEnded)
}

// flushEnded writes the pool's ended leases until none is left unwritten.
func (p *pool) flushEnded() {
	p.mu.Lock()
	if p.e.closed.Load() || !p.e.acting() {
		p.unlock()
		return // Close waits for writes started before it, and none may start after
	}
	p.e.bg.Add(1)
	p.unlock()
	defer p.e.bg.Done()
	w := &p.dur.w
	wrote := false
	for {
		p.mu.Lock()
		if !p.dur.endedDirty || p.deleted {
			p.dur.flushing = false
			p.unlock()
			return
		}
		if wait := endedFlushDelay - p.e.clock.Now().Sub(p.dur.endedFlushed); wrote && wait > 0 {
			// Leases ended during the write: they go in the next batch, one
			// delay after it, not in a write right behind it (which, in a
			// busy pool, would write back to back).
			p.e.clock.AfterFunc(wait, p.flushEnded)
			p.unlock()
			return
		}
		st := p.dur.state
		st.Ended = liveEnded(st.Ended, p.e.clock.Now())
		p.dur.state.Ended = st.Ended
		if w.pending != nil {
			st = mergeReservations(st, *w.pending)
		}
		saved := p.savedLocked(p.cfg, st)
		p.dur.endedDirty = false
		p.dur.endedFlushed = p.e.clock.Now()
		seen := w.writes.Load()
		p.unlock()

		w.mu.Lock()
		stale := w.writes.Load() != seen // written meanwhile, maybe from an older snapshot: take a new one
		var err error
		if !stale {
			err = p.e.persister.SavePool(saved)
			w.writes.Add(1)
			wrote = true
		}
		w.mu.Unlock()
		if stale || err != nil {
			p.mu.Lock()
			p.dur.endedDirty = true
			if err != nil { // the next release, or any foreground write, tries again
				p.dur.flushing = false
				p.unlock()
				return
			}
			p.unlock()
		}
	}
}

// liveEnded returns the ended leases whose expiry is after now, in a new
// slice (a snapshot being written may share the old one).
func liveEnded(ended []EndedLease, now time.Time) []EndedLease {
	out := make([]EndedLease, 0, len(ended))
	for _, e := range ended {
		if e.Expiry.After(now) {
			out = append(out, e)
		}
	}
	return out
}
