package client

import (
	"math/rand/v2"
	"time"

	grpcbackoff "google.golang.org/grpc/backoff"
)

// backoff is the client's one schedule for trying something again: base
// doubling up to max, with ±20% jitter (so that many clients do not retry in
// step).
type backoff struct{ base, max time.Duration }

var (
	// reconnectBackoff paces the Session stream's reconnects.
	reconnectBackoff = backoff{base: 50 * time.Millisecond, max: 2 * time.Second}
	// retryBackoff paces a request's retries after an UNAVAILABLE answer
	// or a failed renew.
	retryBackoff = backoff{base: 25 * time.Millisecond, max: time.Second}
	// shareBackoff paces the attempts to get a rate share the server
	// refused (an unknown pool may be created later).
	shareBackoff = backoff{base: 100 * time.Millisecond, max: 4 * time.Second}
	// provideBackoff paces a provider's registrations after its stream
	// broke.
	provideBackoff = backoff{base: 100 * time.Millisecond, max: 5 * time.Second}
)

// jitter is the fraction by which a pause may be shorter or longer.
const jitter = 0.2

// minRetry is the shortest pause (before jitter) between tries that
// something with a deadline near makes: a lease about to reach its local
// deadline is tried for at least every minRetry·1.2.
const minRetry = 50 * time.Millisecond

// delay returns the pause before try n+1 (n counts from 0). When the try
// must succeed before deadline (not zero), the pause is at most a quarter of
// the time left until it, but not below minRetry: the nearer the deadline,
// the more often it is tried, so that whatever it waits for is tried again
// soon after it comes back.
func (b backoff) delay(n int, deadline time.Time) time.Duration {
	return b.hinted(n, deadline, 0)
}

// hinted is delay when the server asked to wait at least hint (its
// RetryInfo) before the next try: the longer of the two, within the same
// bound before deadline.
func (b backoff) hinted(n int, deadline time.Time, hint time.Duration) time.Duration {
	d := max(min(b.base<<min(n, 16), b.max), hint)
	if !deadline.IsZero() {
		d = min(d, max(time.Until(deadline)/4, minRetry))
	}
	return time.Duration(float64(d) * (1 - jitter + 2*jitter*rand.Float64()))
}

// grpcConfig is the same schedule for a gRPC connection's own reconnects.
func (b backoff) grpcConfig() grpcbackoff.Config {
	return grpcbackoff.Config{BaseDelay: b.base, Multiplier: 2, Jitter: jitter, MaxDelay: b.max}
}
