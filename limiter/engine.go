package limiter

import (
	"context"
	"time"
)

// Options configures an Engine.
type Options struct {
	// Clock is the engine's time source; nil means SystemClock.
	Clock Clock
	// OnLeaseEnded, if set, is called for every lease that ends without its
	// holder's release (expiry, forced pool deletion). It is called without
	// engine locks held, from the goroutine that ended the lease (for expiry,
	// a clock timer), and must not block for long.
	OnLeaseEnded func(LeaseEnded)
}

// Engine is the limiter: a set of named pools, each with a concurrency limit
// and/or a token bucket, granting leases with TTLs. It is safe for
// concurrent use. Create one with New.
type Engine struct{}

// New returns an empty Engine.
func New(opts Options) *Engine { panic("not implemented") }

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { panic("not implemented") }

// Close fails every waiting Acquire and Take with ErrShuttingDown and stops
// the engine's timers; later calls fail with ErrShuttingDown. Leases are
// not released. Close is idempotent.
func (e *Engine) Close() { panic("not implemented") }

// CreatePool creates a pool from cfg with defaults filled in.
// Errors: ErrInvalidArgument (message names the field), ErrPoolExists.
func (e *Engine) CreatePool(cfg PoolConfig) (PoolInfo, error) { panic("not implemented") }

// GetPool returns a pool's configuration and status. Errors: ErrPoolNotFound.
func (e *Engine) GetPool(name string) (PoolInfo, error) { panic("not implemented") }

// ListPools returns up to limit pools whose names sort after `after`, in
// name order, and whether more follow.
func (e *Engine) ListPools(after string, limit int) ([]PoolInfo, bool) { panic("not implemented") }

// UpdatePool applies update to a copy of the pool's configuration, fills in
// defaults, validates it and makes it live. The name cannot change.
// Errors: ErrPoolNotFound, ErrInvalidArgument.
func (e *Engine) UpdatePool(name string, update func(*PoolConfig)) (PoolInfo, error) {
	panic("not implemented")
}

// DeletePool removes a pool. Errors: ErrPoolNotFound; ErrPoolBusy when
// leases are held and force is false.
func (e *Engine) DeletePool(name string, force bool) error { panic("not implemented") }

// Acquire grants a lease, waiting if needed. Errors: see the Err* values.
func (e *Engine) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	panic("not implemented")
}

// Release ends a live lease. Errors: ErrPoolNotFound, ErrLeaseExpired,
// ErrLeaseNotFound.
func (e *Engine) Release(pool string, token uint64) error { panic("not implemented") }

// Renew extends a live lease by ttl from now (0: the lease's TTL).
// Errors: ErrPoolNotFound, ErrLeaseExpired, ErrLeaseNotFound, ErrInvalidArgument.
func (e *Engine) Renew(pool string, token uint64, ttl time.Duration, owner any) (Lease, error) {
	panic("not implemented")
}

// Take takes tokens from a pool's bucket, waiting up to maxWait.
func (e *Engine) Take(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (TakeResult, error) {
	panic("not implemented")
}
