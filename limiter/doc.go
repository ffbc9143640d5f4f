// Package limiter is Tollgate's engine: named pools that grant concurrency
// permits and rate tokens, plain Go with no gRPC, and time from an injected
// Clock so that every behaviour can be tested without sleeping.
//
// The engine's errors are *apierr.Error values (package
// proto/tollgate/v1/apierr: the API's reasons, shared with the server and
// the client); match their kind with errors.Is against apierr's Err* values,
// which each call's documentation lists.
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
// expires and its permits return to the pool. RevokeLease ends a live lease
// at once: its permits return, OnLeaseEnded reports it with
// EndRevoked and the reason, and a later Renew or Release of it fails with
// apierr.ErrLeaseRevoked. Take takes exact tokens from the bucket.
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
//     is within the effective concurrency limit (the configured one, unless
//     adaptive control lowered it) and the bucket has the tokens; held
//     weight exceeds the limit only because the limit was lowered under
//     held leases, and then nothing is granted until it is back under;
//   - held weight equals the sum of the weights of live leases, and no live
//     lease is past its expiry once the clock's due timers have run: a
//     holder that dies leaks nothing beyond its TTL;
//   - fencing tokens are unique and increasing per pool, also across
//     restarts (with a Persister);
//   - exact tokens granted over any window are at most rate × window + burst;
//   - the rate shares granted sum to at most the effective rate (counted
//     exactly, in integer micro-tokens per second), and the bucket refills
//     at the effective rate less the shares.
//
// Expiry uses one timer per pool, armed for the earliest expiry in a
// min-heap of leases: it never scans all leases.
//
// # Persistence and restarts
//
// With a Persister (Options.Persister), pool definitions are durable:
// CreatePool, UpdatePool and DeletePool write through it, under the pool's
// lock, before the change becomes visible, and a failed write changes
// nothing (apierr.ErrStorageFailed). Leases are not written. Instead each pool
// keeps a small DurableState, written ahead of need so that grants cost no
// disk write:
//   - a fencing token ceiling: a block of tokens is reserved before the
//     first of them is issued, the block growing while grants are fast, so
//     a busy pool writes about once a second;
//   - a TTL bound: no possibly live lease was granted or renewed with a
//     longer TTL; a grant with a longer TTL than any before writes it
//     first. It follows the TTLs in use, not MaxLeaseTTL;
//   - a lease horizon: no lease may expire after it; a grant, renewal or
//     re-adoption that would pass it first moves it to now + TTL bound +
//     Options.HorizonSlack, so a busy pool writes about once per slack.
//
// After a restart, RestorePool brings each pool back without writing. Its
// tokens continue above the ceiling, so every token is above every token
// issued before the crash. Until the earlier of its horizon and restart +
// TTL bound, the latest moment a lease granted before the crash can still
// be live, the pool is in its recovery window:
//   - RenewOrReadopt of a lease the engine does not know, with a token up
//     to the old ceiling that the pool's live set says may be live,
//     re-adopts it (same token, exactly the weight its receipt signs) if
//     it fits under the concurrency limit, and fails with
//     apierr.ErrLeaseNotReadopted otherwise: its holder must stop;
//   - Release of such a lease succeeds: nothing was granted over it;
//   - a pool with a concurrency limit grants nothing new: acquires wait in
//     its queue, and a NoWait acquire fails with apierr.ErrRecovering saying until
//     when; when the window ends, the queue is served as usual.
//
// So a restart never grants capacity that a holder who follows the lease
// rules (treat the lease as lost at its expiry minus a safety margin if it
// cannot renew) may still be using: that holder's lease ends by its own
// clock before the window does, unless it renews and is re-adopted, and
// then it is counted. A restored pool with a rate starts with an empty
// bucket, so a restart never grants an extra burst. See docs/recovery.md.
//
// # Adaptive limits and rate shares
//
// Clients report outcomes of their work (Release with WithOutcome,
// RecordOutcome, Report). A pool with PoolConfig.Adaptive on
// keeps a sliding window of them and moves its effective concurrency
// limit and rate, which every grant is checked against, by AIMD: cut by a
// factor when errors and timeouts (or latency) pass a threshold, raised
// by a step toward the configured values while healthy (see
// AdaptiveConfig). Each change is reported to Options.OnPoolEvent.
//
// A client may instead take a share of a pool's effective rate and spend
// it locally (AcquireShare, RefreshShare, ReleaseShare). The
// engine divides the rate by weighted max-min fairness; a new share gets
// only what no one holds, others give back at their refresh, and what
// they give back goes at once to the shares below their fair part
// (reported to Options.OnShareUpdate, which the server pushes to the
// holder). See docs/adaptive.md.
//
// # Statistics and event marks
//
// PoolStats and ListPoolStats return a pool's counters, utilisation and
// the wait-time percentiles of its grants over the last WaitWindow, which
// every grant records in a fixed array of log-scale buckets. Each pool also reports, to Options.OnPoolEvent, when it
// crosses its event marks: PoolOverload, PoolDrained, PoolNearFull and
// PoolLowUtilisation (PoolConfig.OverloadMark and the others).
package limiter
