// Package limiter is Tollgate's engine: named pools that grant concurrency
// permits and rate tokens, plain Go with no gRPC, and time from an injected
// Clock so that every behaviour can be tested without sleeping.
//
// # Model
//
// A pool has a concurrency limit (the most permit weight live leases may hold
// at once), a token bucket (rate per second and burst, from
// golang.org/x/time/rate driven with explicit times under the pool's lock),
// or both; a grant must pass every limit the pool has. Acquire grants a
// Lease: a weight, a fencing token that is strictly increasing per pool (and
// also names the lease within its pool), and an expiry. The holder renews it
// before expiry and releases it when done; a lease that is not renewed
// expires and its permits return to the pool. Take takes exact tokens from
// the bucket.
//
// # Waiting
//
// An acquire that cannot be granted at once waits in the pool's queue:
// higher priority first, FIFO within a priority, and only the head is ever
// granted, so a large request at the head is not starved by small ones
// behind it. A wait ends at the grant, at its wait timeout (by the engine's
// clock), when its context ends, or when the pool changes under it. A wait
// that ends ungranted never consumes a permit. The queue is bounded.
//
// # Invariants
//
// These hold whenever no pool lock is held, and the randomized tests check
// them after every step:
//   - a grant is made only if the pool's held weight plus the grant's weight
//     is within the concurrency limit and the bucket has the tokens; held
//     weight exceeds the limit only because the limit was lowered under
//     held leases, and then nothing is granted until it is back under;
//   - held weight equals the sum of the weights of live leases, and no live
//     lease is past its expiry once the clock's due timers have run: a
//     holder that dies leaks nothing beyond its TTL;
//   - fencing tokens are unique and increasing per pool;
//   - exact tokens granted over any window are at most rate × window + burst.
//
// Expiry uses one timer per pool, armed for the earliest expiry in a
// min-heap of leases: it never scans all leases.
package limiter
