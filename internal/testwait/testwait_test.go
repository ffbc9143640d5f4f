package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test that runs it (so within goes on polling: the test's condition
// holds once the failure is recorded).
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	calls := 0
	For(t, "three increments", func() bool { calls++; return n.Load() == 3 })
	if n.Load() != 3 || calls == 0 {
		t.Fatalf("returned with n=%d after %d calls", n.Load(), calls)
	}
}

func TestForFailsNamingWhatItAwaited(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	within(r, 20*time.Millisecond, "the pool to drain", func() bool { return r.failed != "" })
	if !strings.Contains(r.failed, "timed out") || !strings.Contains(r.failed, "the pool to drain") {
		t.Fatalf("failure %q does not say it timed out waiting for the pool to drain", r.failed)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("gave up after %v, before its limit", d)
	}
}
