package shard

import (
	"hash/fnv"
	"testing"
)

// The vectors a client in another language checks its own function
// against (docs/ha.md lists them too).
var vectors = []struct {
	pool  string
	count int
	want  int
}{
	{"", 16, 5},   // 0x811c9dc5 mod 16
	{"a", 16, 12}, // 0xe40c292c
	{"orders-db", 64, 21},
	{"pool-7", 64, 39},
	{"orders-db", 1, 0}, // one shard: always 0
	{"orders-db", 0, 0}, // fewer counts as one
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		if got := Of(v.pool, v.count); got != v.want {
			t.Errorf("Of(%q, %d) = %d, want %d", v.pool, v.count, got, v.want)
		}
	}
}

// Of is FNV-1a-32 as the standard library computes it.
func FuzzOfIsFNV1a(f *testing.F) {
	f.Add("orders-db", 64)
	f.Add("日本", 7)
	f.Fuzz(func(t *testing.T, pool string, count int) {
		if count < 2 || count > MaxCount {
			return
		}
		h := fnv.New32a()
		h.Write([]byte(pool))
		if got, want := Of(pool, count), int(h.Sum32()%uint32(count)); got != want {
			t.Fatalf("Of(%q, %d) = %d; FNV-1a says %d", pool, count, got, want)
		}
	})
}
