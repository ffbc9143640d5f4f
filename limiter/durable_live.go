package limiter

import "time"

// A pool's durable part writes its live set (liveSet) in the background,
// never on the grant or release path: at once when the pool wrote none in
// the last endedFlushDelay, else a batch at the end of it, one write for every
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

// liveChanged starts writing the live set in the background: a lease
// ended or was resized. Grants need no write: a token above the written
// mark may be live.
func (d *durable) liveChanged() {
	if d.env.persister == nil || d.flushing {
		return
	}
	d.flushing = true
	d.env.clock.AfterFunc(max(0, endedFlushDelay-d.env.clock.Now().Sub(unixNano(d.liveFlushed))), d.flushLive)
}

// flushLive writes the pool's live set until nothing is left unwritten.
func (d *durable) flushLive() {
	d.host.lock()
	if d.env.closed.Load() || !d.env.acting() {
		d.host.unlock()
		return // Close waits for writes started before it, and none may start after
	}
	d.env.bg.Add(1)
	d.host.unlock()
	defer d.env.bg.Done()
	w := &d.w
	wrote := false
	for {
		d.host.lock()
		if !d.live.pending() || d.host.gone() {
			d.flushing = false
			d.host.unlock()
			return
		}
		if wait := endedFlushDelay - d.env.clock.Now().Sub(unixNano(d.liveFlushed)); wrote && wait > 0 {
			// Changes made during the write go in the next batch, one
			// delay after it, not in a write right behind it (which, in a
			// busy pool, would write back to back).
			d.env.clock.AfterFunc(wait, d.flushLive)
			d.host.unlock()
			return
		}
		st := d.state
		if w.pending != nil {
			st = mergeReservations(st, *w.pending)
		}
		saved := d.saved(nil, st)
		d.liveFlushed = d.env.clock.Now().UnixNano()
		seen := w.writes.Load()
		d.host.unlock()

		w.mu.Lock()
		stale := w.writes.Load() != seen // written meanwhile, from a newer snapshot: look again
		var err error
		var last uint64
		if !stale {
			err = saveLater(d.env.persister, saved)
			last = w.writes.Add(1)
			wrote = true
		}
		w.mu.Unlock()
		d.host.lock()
		if stale { // the write that went first may have carried older unsure ranges
			d.live.failed()
			d.host.unlock()
			continue
		}
		d.backgroundWritten(saved, last, err)
		if err != nil { // the next change, or any foreground write, tries again
			d.flushing = false
			d.host.unlock()
			return
		}
		d.host.unlock()
	}
}
