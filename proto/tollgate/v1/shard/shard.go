// Package shard says which shard of a cluster a pool belongs to. It is
// part of the API: a client in any language computes the same answer from
// the pool's name and the cluster's shard count (GetCluster's
// shard_count), with this one rule:
//
//	shard = FNV-1a-32(UTF-8 bytes of the pool name) mod shard_count
//
// FNV-1a-32 starts from the offset basis 2166136261 (0x811c9dc5) and, for
// each byte b, xors b into the hash and multiplies it by the FNV prime
// 16777619 (0x01000193), modulo 2^32. A standalone server, and a cluster
// created with one shard, has shard_count 1: every pool is in shard 0.
//
// The package imports only the standard library.
package shard

// MaxCount is the most shards a cluster may have.
const MaxCount = 4096

// Of returns the shard of the pool named pool in a cluster of count
// shards: a number in [0, count). count below 1 counts as 1.
func Of(pool string, count int) int {
	if count <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(pool); i++ {
		h ^= uint32(pool[i])
		h *= 16777619
	}
	return int(h % uint32(count))
}
