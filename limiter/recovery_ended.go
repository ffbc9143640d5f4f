package limiter

import "time"

// This file writes a pool's live set (liveSet) in the background, never on
// the grant or release path: at once when the pool wrote none in the last
// endedFlushDelay, else a batch at the end of it, one write for every
// release, revocation and resize since the last. A lease released (or a
// share shrunk) less than one write (or, in a busy pool, endedFlushDelay
// plus one write) before a crash may still be re-adopted as it was: see
// docs/recovery.md for why that is the one case a write per release would
// be needed to close. An expiry needs no write: a renew never signs an
// expiry earlier than one it signed before, so every receipt of an expired
// lease shows an expiry that has passed.

// endedFlushDelay is the least time between two background writes of a
// pool's live set, so that in a busy pool one write carries many changes.
const endedFlushDelay = 100 * time.Millisecond

// liveChangedLocked starts writing the live set in the background: a
// lease ended or was resized. Grants need no write: a token above the
// written mark may be live.
func (p *pool) liveChangedLocked() {
	if p.e.persister == nil || p.dur.flushing {
		return
	}
	p.dur.flushing = true
	p.e.clock.AfterFunc(max(0, endedFlushDelay-p.e.clock.Now().Sub(p.dur.liveFlushed)), p.flushLive)
}

// flushLive writes the pool's live set until nothing is left unwritten.
func (p *pool) flushLive() {
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
		if !p.dur.live.pending() || p.deleted {
			p.dur.flushing = false
			p.unlock()
			return
		}
		if wait := endedFlushDelay - p.e.clock.Now().Sub(p.dur.liveFlushed); wrote && wait > 0 {
			// Changes made during the write go in the next batch, one
			// delay after it, not in a write right behind it (which, in a
			// busy pool, would write back to back).
			p.e.clock.AfterFunc(wait, p.flushLive)
			p.unlock()
			return
		}
		st := p.dur.state
		if w.pending != nil {
			st = mergeReservations(st, *w.pending)
		}
		saved := p.savedLocked(p.cfg, st)
		p.dur.liveFlushed = p.e.clock.Now()
		seen := w.writes.Load()
		p.unlock()

		w.mu.Lock()
		stale := w.writes.Load() != seen // written meanwhile, from a newer snapshot: look again
		var err error
		var last uint64
		if !stale {
			err = p.e.saveLater(saved)
			last = w.writes.Add(1)
			wrote = true
		}
		w.mu.Unlock()
		p.mu.Lock()
		if stale { // the write that went first may have carried older unsure ranges
			p.dur.live.failed()
			p.unlock()
			continue
		}
		p.backgroundWrittenLocked(saved, last, err)
		if err != nil { // the next change, or any foreground write, tries again
			p.dur.flushing = false
			p.unlock()
			return
		}
		p.unlock()
	}
}
