package limiter

import (
	"sync"
	"testing"

	"github.com/tollgate/tollgate/limiter/fakeclock"
)

// eventEngine is an Engine on a fake clock that records pool events and
// share updates.
type eventEngine struct {
	*testEngine

	emu     sync.Mutex
	events  []PoolEvent
	updates []ShareUpdate
}

func newEventEngine(t testing.TB) *eventEngine {
	t.Helper()
	ee := &eventEngine{testEngine: &testEngine{clk: fakeclock.New(epoch)}}
	ee.Engine = New(Options{
		Clock: ee.clk,
		OnPoolEvent: func(ev PoolEvent) {
			ee.emu.Lock()
			ee.events = append(ee.events, ev)
			ee.emu.Unlock()
		},
		OnShareUpdate: func(su ShareUpdate) {
			ee.emu.Lock()
			ee.updates = append(ee.updates, su)
			ee.emu.Unlock()
		},
	})
	t.Cleanup(ee.Close)
	return ee
}

// takeEvents returns and clears the recorded pool events.
func (ee *eventEngine) takeEvents() []PoolEvent {
	ee.emu.Lock()
	defer ee.emu.Unlock()
	evs := ee.events
	ee.events = nil
	return evs
}

// takeUpdates returns and clears the recorded share updates.
func (ee *eventEngine) takeUpdates() []ShareUpdate {
	ee.emu.Lock()
	defer ee.emu.Unlock()
	us := ee.updates
	ee.updates = nil
	return us
}

// report reports n outcomes of kind o for pool.
func (ee *eventEngine) report(t testing.TB, pool string, o Outcome, n int64) {
	t.Helper()
	r := OutcomeReport{Pool: pool}
	switch o {
	case OutcomeSuccess:
		r.Successes = n
	case OutcomeError:
		r.Errors = n
	case OutcomeTimeout:
		r.Timeouts = n
	}
	if err := ee.Report([]OutcomeReport{r}); err != nil {
		t.Fatalf("Report(%+v): %v", r, err)
	}
}

// effective returns a pool's effective concurrency limit and rate.
func (ee *eventEngine) effective(t testing.TB, pool string) (int64, float64) {
	t.Helper()
	s := ee.status(t, pool)
	return s.EffectiveConcurrencyLimit, s.EffectiveRate
}

// checkAll checks the engine's invariants; prev carries held weights
// between calls.
func (ee *eventEngine) checkAll(t testing.TB, prev map[string]int64) {
	t.Helper()
	if err := ee.checkInvariants(prev); err != nil {
		t.Fatal(err)
	}
}
