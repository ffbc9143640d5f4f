package limiter

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter/fakeclock"
)

// TestAlarm: an alarm fires at the earliest instant it was armed for,
// once, and a later instant does not postpone it.
func TestAlarm(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	now := clk.Now()
	var a alarm
	fired := 0
	ring := func(a *alarm) { a.rang(); fired++ }
	armAlarm(&a, clk, now.Add(2*time.Second), now, ring, &a)
	armAlarm(&a, clk, now.Add(3*time.Second), now, ring, &a) // later: no change
	armAlarm(&a, clk, now.Add(time.Second), now, ring, &a)   // earlier: moves it
	clk.Advance(time.Second)
	if fired != 1 || a.at != 0 {
		t.Fatalf("after 1s: fired %d times, armed for %v", fired, a.at)
	}
	clk.Advance(5 * time.Second)
	if fired != 1 {
		t.Fatalf("fired %d times, want once", fired)
	}
	armAlarm(&a, clk, clk.Now().Add(time.Second), clk.Now(), ring, &a)
	a.stop()
	clk.Advance(time.Minute)
	if fired != 1 || a.at != 0 {
		t.Fatalf("a stopped alarm fired: %d", fired)
	}
}
