package limiter

import (
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// What a service outside the engine, such as Envoy's rate-limit API, reads
// to map its requests to pools and to size buckets of its own after them.

// PoolsGeneration changes whenever a pool is created, restored, updated or
// deleted, so that a caller may cache what it read of the pools'
// configurations (EnvoyRules) until it changes.
func (e *Engine) PoolsGeneration() uint64 { return e.pools.gen.Load() }

// EnvoyRules returns the rule of each pool that has one, by pool name.
func (e *Engine) EnvoyRules() map[string]EnvoyRule {
	out := make(map[string]EnvoyRule)
	for _, p := range e.pools.snapshot() {
		p.mu.Lock()
		if !p.deleted && !p.cfg.Envoy.IsZero() {
			out[p.name] = p.cfg.Envoy
		}
		p.unlock()
	}
	return out
}

// BucketState is a pool's token bucket at one instant.
type BucketState struct {
	// Rate is the bucket's refill in tokens per second: the effective
	// rate (adaptive cuts included) less the rate held as shares.
	Rate float64
	// Burst is the bucket's size.
	Burst int64
	// Tokens is its level; negative while takes wait on reserved tokens.
	Tokens float64
	// At is the instant, by the engine's clock.
	At time.Time
	// Since is when Rate or Burst last changed (by UpdatePool, adaptive
	// control or rate shares), by the engine's clock.
	Since time.Time
}

// Bucket returns the state of a pool's token bucket now. Errors:
// apierr.ErrPoolNotFound; apierr.ErrNoRateLimit.
func (e *Engine) Bucket(pool string) (BucketState, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return BucketState{}, err
	}
	defer p.unlock()
	if p.bucket == nil {
		return BucketState{}, errorf(apierr.ErrNoRateLimit, "pool %q has no rate limit, only a concurrency limit", pool)
	}
	now := e.clock.Now()
	return BucketState{Rate: float64(p.bucket.Limit()), Burst: p.cfg.Burst, Tokens: p.bucket.TokensAt(now), At: now, Since: time.Unix(0, p.rateSince)}, nil
}
