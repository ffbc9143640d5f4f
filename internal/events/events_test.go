package events

import "testing"

func TestEventRingIsBounded(t *testing.T) {
	var r Ring
	for i := range RecentLen + 10 {
		r.Add(Event{Type: PoolCreated, Pool: "p", Detail: string(rune('a' + i%26))})
	}
	evs := r.NewestFirst()
	if len(evs) != RecentLen {
		t.Fatalf("kept %d events, want %d", len(evs), RecentLen)
	}
	if evs[0].Seq != RecentLen+10 || evs[len(evs)-1].Seq != 11 {
		t.Fatalf("kept seq %d..%d, want %d..11", evs[0].Seq, evs[len(evs)-1].Seq, RecentLen+10)
	}
}
