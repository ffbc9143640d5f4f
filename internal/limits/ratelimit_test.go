package limits

import (
	"fmt"
	"testing"
	"time"
)

// Idle rate buckets are dropped, so memory follows the active clients.
func TestClientRatesEvictIdle(t *testing.T) {
	c := NewRates(10, 20) // refills in 2s
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	for i := range 1000 {
		c.Allow("addr:10.0.0." + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	if c.size() != 1000 {
		t.Fatalf("size = %d, want 1000", c.size())
	}
	now = now.Add(3 * time.Second)
	c.Allow("addr:new")
	if c.size() != 1 {
		t.Fatalf("size after the idle period = %d, want 1", c.size())
	}
	// A full bucket dropped and made again allows the same burst.
	for i := range 19 {
		if !c.Allow("addr:new") {
			t.Fatalf("request %d of the burst refused", i+2)
		}
	}
	if c.Allow("addr:new") {
		t.Fatal("request past the burst allowed")
	}
	if NewRates(0, 0) != nil || !(*Rates)(nil).Allow("x") {
		t.Fatal("a zero rate must mean no limit")
	}
}

// BenchmarkClientRates measures the per-client rate check of every call,
// over 1 and 10,000 clients.
func BenchmarkClientRates(b *testing.B) {
	for _, clients := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			c := NewRates(1e9, 1e9)
			keys := make([]string, clients)
			for i := range keys {
				keys[i] = fmt.Sprintf("addr:10.0.%d.%d", i/256, i%256)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.Allow(keys[i%clients])
				i++
			}
		})
	}
}
