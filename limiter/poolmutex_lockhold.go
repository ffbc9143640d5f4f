//go:build lockhold

package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// poolMutex is a pool's lock that counts how long it is held, across all
// pools, for the benchmark of lock hold time per grant (build tag
// lockhold; see docs/benchmarks.md).
type poolMutex struct {
	sync.Mutex
	since time.Time // when the holder took it
}

var lockHolds, lockHeldNanos atomic.Int64

func (m *poolMutex) Lock() {
	m.Mutex.Lock()
	m.since = time.Now()
}

func (m *poolMutex) TryLock() bool {
	if !m.Mutex.TryLock() {
		return false
	}
	m.since = time.Now()
	return true
}

func (m *poolMutex) Unlock() {
	lockHeldNanos.Add(int64(time.Since(m.since)))
	lockHolds.Add(1)
	m.Mutex.Unlock()
}

// LockHeld returns how many times any pool's lock was taken, and for how
// long in all, since the process started. It exists only in a build with
// the lockhold tag.
func LockHeld() (holds int64, held time.Duration) {
	return lockHolds.Load(), time.Duration(lockHeldNanos.Load())
}
