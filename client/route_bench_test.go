package client

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkLinkFor measures what routing adds to each request: the
// lookup of the link of a pool's shard's owner (unsharded: the dialed
// target's link).
func BenchmarkLinkFor(b *testing.B) {
	for _, count := range []int{1, 256} {
		b.Run("shards="+strconv.Itoa(count), func(b *testing.B) {
			c, err := Dial("127.0.0.1:1") // never connects: only routes
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			r := &routes{count: count}
			if count > 1 {
				r.shards = make([]atomic.Pointer[route], count)
				for i := range r.shards {
					r.shards[i].Store(&route{addr: "s", ln: c.main})
				}
			}
			c.routes.Store(r)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if c.linkFor("orders-db-primary") == nil {
					b.Fatal("no link")
				}
			}
		})
	}
}
