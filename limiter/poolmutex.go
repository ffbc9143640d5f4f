//go:build !lockhold

package limiter

import "sync"

// poolMutex is a pool's lock. Built with the lockhold tag it also counts
// how long it is held (LockHeld), for the benchmark of lock hold time per
// grant; without it, it is a plain mutex.
type poolMutex struct{ sync.Mutex }
