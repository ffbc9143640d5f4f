package election

import (
	"hash/fnv"
	"strconv"
)

// Assign is the balance of the shards over the members: the desired
// owner of each of shards shards, given the members' addresses sorted and
// without duplicates. It is a bounded-load rendezvous hash: for shard i
// in order, the members are ranked by score(addr + "/" + i), highest
// first (a tie to the lower address), and the shard goes to the best-ranked member
// that has fewer than ceil(shards/len(members)) shards so far. So no
// member has more than that, and a member joining or leaving moves few
// shards besides its own share. Every server computes the same answer
// from the same members. With no members, every owner is "".
//
// score is FNV-1a-64 followed by MurmurHash3's 64-bit finalizer: FNV
// alone mixes its last bytes into the low bits only, so that addresses
// differing in one byte ("10.0.0.1:7070", "10.0.0.2:7070") would rank the
// same way for most shards and the shards would go out in runs, one member
// after another, every run moving when a member joins.
func Assign(members []string, shards int) []string {
	out := make([]string, max(shards, 0))
	if len(members) == 0 {
		return out
	}
	limit := (shards + len(members) - 1) / len(members)
	load := make([]int, len(members))
	h := fnv.New64a()
	for i := range out {
		suffix := "/" + strconv.Itoa(i)
		best, bestScore := -1, uint64(0)
		for j, m := range members {
			if load[j] >= limit {
				continue
			}
			h.Reset()
			_, _ = h.Write([]byte(m))
			_, _ = h.Write([]byte(suffix))
			if s := mix(h.Sum64()); best < 0 || s > bestScore {
				best, bestScore = j, s
			}
		}
		load[best]++
		out[i] = members[best]
	}
	return out
}

// mix is MurmurHash3's 64-bit finalizer (fmix64).
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb93e53a874d5
	h ^= h >> 33
	return h
}
