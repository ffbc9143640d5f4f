package limiter

import (
	"cmp"
	"slices"
)

// A pool's live set says, durably, which of its leases may be live, so
// that a restarted engine re-adopts a lease only if it was live at the
// crash (docs/recovery.md). Fencing tokens are dense per pool, so it is
// written as what is live, not as what ended: a mark (DurableState.LiveMark,
// the last token issued when the record was written) and, for the tokens
// at or below it, the chunks of LiveChunkTokens consecutive tokens that
// hold a live lease (SavedPool.LiveChunks). A token above the mark was
// issued after the write, and may be live; one at or below it is live
// only if its chunk says so, or, with no chunk written, if it lies in one
// of the Unsure ranges (tokens issued before a restart that no write since
// has resolved).
//
// Grants set a bit in memory and write nothing; an end clears it. The
// background write (flushLive) carries only the chunks that changed since
// the last write, and drops the chunks that hold no live lease any more,
// so that its size follows what changed, and no amount of churn by any
// client makes a live lease look ended. A chunk also records the weight a
// lease was last resized to (a concurrency share), so that a receipt
// signed before a shrink does not re-adopt the weight given back.

// LiveChunkTokens is how many consecutive fencing tokens a LiveChunk
// covers: chunk i holds tokens i*LiveChunkTokens to
// (i+1)*LiveChunkTokens-1.
const LiveChunkTokens = 4096

// LiveBits has one bit per token of a chunk: bit j%64 of word j/64 is the
// chunk's token j.
type LiveBits [LiveChunkTokens / 64]uint64

// LiveChunk is one chunk of a pool's live set as SavePool writes it (the
// chunks changed since the pool's last write) and RestorePool reads it
// (every chunk written).
type LiveChunk struct {
	Index uint64
	// Delete: the chunk holds no live lease; forget it. Bits and Resized
	// are then empty.
	Delete bool
	// Bits are the chunk's tokens whose leases may be live.
	Bits LiveBits
	// Resized are the leases of the chunk resized since their grant.
	Resized []ResizedLease
}

// ResizedLease is a live lease whose weight changed since its grant (a
// concurrency share): a re-adoption is refused for a weight above Weight.
type ResizedLease struct {
	Token  uint64
	Weight int64
}

// TokenRange is the fencing tokens First to Last, inclusive.
type TokenRange struct {
	First, Last uint64
}

// maxUnsure bounds a pool's Unsure ranges: one is added by each restart
// during the recovery window of the one before. Past it, the oldest is
// resolved as if its window had ended: its leases not re-adopted by then,
// through that many restarts, are refused.
const maxUnsure = 16

// liveChunk is a chunk in memory.
type liveChunk struct {
	bits    LiveBits
	resized map[uint64]int64 // by token; nil when none
	ver     uint64           // liveSet.ver at its last change
	dirty   bool             // changed since the last write that carried it
	stored  bool             // a write may have put it on disk
}

func (c *liveChunk) empty() bool {
	for _, w := range c.bits {
		if w != 0 {
			return false
		}
	}
	return true
}

// liveSet is a pool's live set in memory, guarded by the pool's mutex. It
// is kept only with a Persister.
type liveSet struct {
	chunks map[uint64]*liveChunk
	dirty  []uint64 // chunks with dirty set
	unsure []TokenRange
	// unsureDirty: unsure changed since the last write.
	unsureDirty bool
	ver         uint64
	last        *liveChunk // the chunk of the newest grant: grants reuse it
	lastIdx     uint64
}

func chunkOf(token uint64) (idx uint64, word int, bit uint64) {
	off := token % LiveChunkTokens
	return token / LiveChunkTokens, int(off / 64), 1 << (off % 64)
}

// inUnsure reports whether token lies in an Unsure range.
func (s *liveSet) inUnsure(token uint64) bool {
	for _, r := range s.unsure {
		if token >= r.First && token <= r.Last {
			return true
		}
	}
	return false
}

// chunkUnsure reports whether chunk idx overlaps an Unsure range.
func (s *liveSet) chunkUnsure(idx uint64) bool {
	first, last := idx*LiveChunkTokens, idx*LiveChunkTokens+LiveChunkTokens-1
	for _, r := range s.unsure {
		if r.First <= last && r.Last >= first {
			return true
		}
	}
	return false
}

// chunk returns token's chunk, made (with the tokens of Unsure ranges
// live, as an unwritten chunk reads) if there is none.
func (s *liveSet) chunk(token uint64) *liveChunk {
	idx, _, _ := chunkOf(token)
	if s.last != nil && s.lastIdx == idx {
		return s.last
	}
	c := s.chunks[idx]
	if c == nil {
		if s.chunks == nil {
			s.chunks = make(map[uint64]*liveChunk)
		}
		c = &liveChunk{}
		for _, r := range s.unsure {
			setRange(&c.bits, idx, r, true)
		}
		s.chunks[idx] = c
	}
	s.last, s.lastIdx = c, idx
	return c
}

// setRange sets (or clears) the bits of chunk idx's tokens in r.
func setRange(b *LiveBits, idx uint64, r TokenRange, on bool) {
	first, last := idx*LiveChunkTokens, idx*LiveChunkTokens+LiveChunkTokens-1
	lo, hi := max(first, r.First), min(last, r.Last)
	for t := lo; t <= hi && lo <= hi; t++ {
		_, w, bit := chunkOf(t)
		if on {
			b[w] |= bit
		} else {
			b[w] &^= bit
		}
		if t == hi {
			break
		}
	}
}

// touch records that c changed.
func (s *liveSet) touch(idx uint64, c *liveChunk) {
	s.ver++
	c.ver = s.ver
	if !c.dirty {
		c.dirty = true
		s.dirty = append(s.dirty, idx)
	}
}

// grant records that the lease token was granted.
func (s *liveSet) grant(token uint64) {
	c := s.chunk(token)
	_, w, bit := chunkOf(token)
	c.bits[w] |= bit
	s.touch(s.lastIdx, c)
}

// end records that the lease token ended.
func (s *liveSet) end(token uint64) {
	c := s.chunk(token)
	_, w, bit := chunkOf(token)
	c.bits[w] &^= bit
	if c.resized != nil {
		delete(c.resized, token)
	}
	s.touch(s.lastIdx, c)
}

// resize records that the live lease token now has weight.
func (s *liveSet) resize(token uint64, weight int64) {
	c := s.chunk(token)
	if c.resized == nil {
		c.resized = make(map[uint64]int64)
	}
	c.resized[token] = weight
	s.touch(s.lastIdx, c)
}

// live reports whether token's lease may be live, and the weight it was
// last resized to (0: not resized).
func (s *liveSet) live(token uint64) (bool, int64) {
	idx, w, bit := chunkOf(token)
	c := s.chunks[idx]
	if c == nil {
		return s.inUnsure(token), 0
	}
	return c.bits[w]&bit != 0, c.resized[token]
}

// restore sets the live set up from what was written (chunks, and st's
// Unsure and LiveMark), after a restart at which the leases up to ceiling
// may be live (window) or are all over (not window).
func (s *liveSet) restore(chunks []LiveChunk, st DurableState, ceiling uint64, window bool) {
	*s = liveSet{chunks: make(map[uint64]*liveChunk, len(chunks))}
	for _, lc := range chunks {
		if lc.Delete {
			continue
		}
		c := &liveChunk{bits: lc.Bits, stored: true}
		for _, r := range lc.Resized {
			if c.resized == nil {
				c.resized = make(map[uint64]int64)
			}
			c.resized[r.Token] = r.Weight
		}
		s.chunks[lc.Index] = c
	}
	if !window { // every lease is over: forget them all, on disk too
		for idx, c := range s.chunks {
			c.bits, c.resized = LiveBits{}, nil
			s.touch(idx, c)
		}
		s.unsureDirty = len(st.Unsure) > 0
		return
	}
	s.unsure = slices.Clone(st.Unsure)
	if ceiling > st.LiveMark { // issued after the last write: any may be live
		added := TokenRange{st.LiveMark + 1, ceiling}
		for idx, c := range s.chunks { // a written chunk holding some of them (the mark's) reads them as live from now on
			if idx*LiveChunkTokens <= added.Last && idx*LiveChunkTokens+LiveChunkTokens-1 >= added.First {
				setRange(&c.bits, idx, added, true)
				s.touch(idx, c)
			}
		}
		if n := len(s.unsure); n > 0 && s.unsure[n-1].Last+1 == added.First {
			s.unsure[n-1].Last = added.Last
		} else {
			s.unsure = append(s.unsure, added)
		}
		s.unsureDirty = true
	}
	for len(s.unsure) > maxUnsure {
		s.resolve(s.unsure[0], nil)
		s.unsure = s.unsure[1:]
	}
}

// resolve makes the tokens of r live exactly when live says so (nil:
// none), once r leaves the Unsure ranges: its chunks are made and
// rewritten. The caller removes r from s.unsure.
func (s *liveSet) resolve(r TokenRange, live map[uint64]*lease) {
	var keep []uint64
	for t := range live {
		if t >= r.First && t <= r.Last {
			keep = append(keep, t)
			s.chunk(t) // made while r still reads as live
		}
	}
	for idx, c := range s.chunks {
		if idx*LiveChunkTokens <= r.Last && idx*LiveChunkTokens+LiveChunkTokens-1 >= r.First {
			setRange(&c.bits, idx, r, false)
			s.touch(idx, c)
		}
	}
	for _, t := range keep {
		idx, w, bit := chunkOf(t)
		s.chunks[idx].bits[w] |= bit
	}
	s.unsureDirty = true
}

// resolveAll ends the Unsure ranges at the end of a recovery window: the
// leases from before the restart that were not re-adopted are over.
func (s *liveSet) resolveAll(live map[uint64]*lease) {
	for _, r := range s.unsure {
		s.resolve(r, live)
	}
	s.unsure = nil
}

// clear forgets every lease: none is live (a clean stop of a pool that
// holds nothing).
func (s *liveSet) clear() {
	for idx, c := range s.chunks {
		c.bits, c.resized = LiveBits{}, nil
		s.touch(idx, c)
	}
	s.unsureDirty = s.unsureDirty || len(s.unsure) > 0
	s.unsure = nil
}

// pending reports whether the live set changed since the last write.
func (s *liveSet) pending() bool { return len(s.dirty) > 0 || s.unsureDirty }

// liveVer is the version of one chunk a write carries.
type liveVer struct {
	idx, ver uint64
}

// snapshot returns what a write records of the live set: the Unsure
// ranges, the chunks changed since the last write, and their versions
// (for written). Chunks that never reached a write and hold nothing are
// dropped here.
func (s *liveSet) snapshot() (unsure []TokenRange, chunks []LiveChunk, vers []liveVer) {
	unsure = slices.Clone(s.unsure)
	s.unsureDirty = false
	s.dedupe()
	kept := s.dirty[:0]
	for _, idx := range s.dirty {
		c := s.chunks[idx]
		if c == nil || !c.dirty {
			continue
		}
		lc := LiveChunk{Index: idx}
		switch {
		case !c.empty() || s.chunkUnsure(idx):
			lc.Bits = c.bits
			for t, w := range c.resized {
				lc.Resized = append(lc.Resized, ResizedLease{t, w})
			}
			slices.SortFunc(lc.Resized, func(a, b ResizedLease) int { return cmp.Compare(a.Token, b.Token) })
			c.stored = true
		case c.stored:
			lc.Delete = true
		default: // nothing on disk, nothing to write
			s.drop(idx)
			continue
		}
		chunks = append(chunks, lc)
		vers = append(vers, liveVer{idx, c.ver})
		kept = append(kept, idx)
	}
	s.dirty = kept
	return unsure, chunks, vers
}

// written records that a write of snapshot vers succeeded: the chunks
// that did not change since are clean, and those it deleted forgotten.
func (s *liveSet) written(chunks []LiveChunk, vers []liveVer) {
	for i, v := range vers {
		c := s.chunks[v.idx]
		if c == nil || c.ver != v.ver {
			continue
		}
		c.dirty = false
		if chunks[i].Delete {
			s.drop(v.idx)
		}
	}
	kept := s.dirty[:0]
	for _, idx := range s.dirty {
		if c := s.chunks[idx]; c != nil && c.dirty {
			kept = append(kept, idx)
		}
	}
	s.dirty = kept
	s.dedupe()
}

// dedupe drops the repeated indexes of s.dirty: a chunk dropped and made
// again is listed twice, and a write must carry it once.
func (s *liveSet) dedupe() {
	if len(s.dirty) < 2 {
		return
	}
	seen := make(map[uint64]struct{}, len(s.dirty))
	kept := s.dirty[:0]
	for _, idx := range s.dirty {
		if _, dup := seen[idx]; !dup {
			seen[idx] = struct{}{}
			kept = append(kept, idx)
		}
	}
	s.dirty = kept
}

// failed records that a snapshot was not written (the write failed, or
// was dropped for another): its record change is still to write (its
// chunks are still dirty).
func (s *liveSet) failed() { s.unsureDirty = true }

// drop forgets chunk idx in memory.
func (s *liveSet) drop(idx uint64) {
	delete(s.chunks, idx)
	if s.last != nil && s.lastIdx == idx {
		s.last = nil
	}
}
