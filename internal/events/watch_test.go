package events

import "testing"

func TestWatchSeesRecentThenLiveEventsOfItsPool(t *testing.T) {
	var r Ring
	r.Add(Event{Type: PoolCreated, Pool: "a"})
	r.Add(Event{Type: PoolCreated, Pool: "b"})
	w, recent := r.Watch("a", true)
	if len(recent) != 1 || recent[0].Pool != "a" || recent[0].Seq != 1 {
		t.Fatalf("recent events of a: %+v", recent)
	}
	all, none := r.Watch("", false)
	if none != nil {
		t.Fatalf("recent events without includeRecent: %+v", none)
	}
	r.Add(Event{Type: PoolDeleted, Pool: "b"})
	r.Add(Event{Type: PoolDeleted, Pool: "a"})
	if ev := <-w.C(); ev.Pool != "a" || ev.Seq != 4 || len(w.C()) != 0 {
		t.Fatalf("a's watcher got %+v, then %d more; want only a's event 4", ev, len(w.C()))
	}
	if got := []uint64{(<-all.C()).Seq, (<-all.C()).Seq}; got[0] != 3 || got[1] != 4 {
		t.Fatalf("the watcher of every pool got seqs %v; want 3, 4", got)
	}
	r.Unwatch(w)
	r.Unwatch(w) // again: nothing
	if r.NumWatchers() != 1 {
		t.Fatalf("%d watchers after Unwatch; want 1", r.NumWatchers())
	}
}

func TestAWatcherThatFallsBehindIsDropped(t *testing.T) {
	var r Ring
	r.SetWatchBuffer(2)
	slow, _ := r.Watch("", false)
	other, _ := r.Watch("b", false)
	for range 3 {
		r.Add(Event{Type: PoolUpdated, Pool: "a"})
	}
	select {
	case <-slow.Overflow():
	default:
		t.Fatal("a watcher 3 events behind with a buffer of 2 was not told it overflowed")
	}
	select {
	case <-other.Overflow():
		t.Fatal("a watcher of another pool overflowed")
	default:
	}
	if r.NumWatchers() != 1 || len(slow.C()) != 2 {
		t.Fatalf("%d watchers, %d events buffered for the dropped one; want 1 and 2", r.NumWatchers(), len(slow.C()))
	}
	r.Add(Event{Type: PoolUpdated, Pool: "a"}) // no send on the dropped watcher
	r.Unwatch(slow)                            // dropped already: nothing
}

func TestWatchersAreBounded(t *testing.T) {
	var r Ring
	for i := range MaxWatchers {
		if w, _ := r.Watch("", false); w == nil {
			t.Fatalf("watcher %d refused", i)
		}
	}
	if w, _ := r.Watch("", true); w != nil {
		t.Fatalf("watcher %d of at most %d accepted", MaxWatchers+1, MaxWatchers)
	}
}
