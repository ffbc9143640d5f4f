package limiter

import (
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Outcome is how one run of protected work ended, as the protected system
// saw it: what adaptive control feeds on.
type Outcome uint8

// Outcomes.
const (
	// OutcomeSuccess: the protected system did what was asked.
	OutcomeSuccess Outcome = iota + 1
	// OutcomeError: it failed or pushed back (a 5xx, a 429, a refused
	// connection).
	OutcomeError
	// OutcomeTimeout: it did not answer in time.
	OutcomeTimeout
)

// String returns "success", "error", "timeout" or "unknown".
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeError:
		return "error"
	case OutcomeTimeout:
		return "timeout"
	}
	return "unknown"
}

// Bounds of reports.
const (
	// MaxReportCount bounds each count of one OutcomeReport.
	MaxReportCount = 1_000_000_000
	// MaxReportPools bounds the pools of one Report call.
	MaxReportPools = 1000
)

// OutcomeReport is a batch of outcomes of work under one pool, for a
// client that spends rate tokens or shares and has no lease to release
// with an outcome. Latency is summarized by its count, sum and maximum:
// the mean is what adaptive control uses.
type OutcomeReport struct {
	Pool                        string
	Successes, Errors, Timeouts int64
	// LatencyCount is how many of the outcomes carried a latency (at most
	// their total); LatencySum and LatencyMax are the sum and the largest
	// of those latencies (both 0 when LatencyCount is 0).
	LatencyCount int64
	LatencySum   time.Duration
	LatencyMax   time.Duration
}

// check validates r; i is its index in a batch, for messages.
func (r *OutcomeReport) check() error {
	n := r.Successes + r.Errors + r.Timeouts
	for _, c := range []struct {
		name string
		v    int64
	}{{"successes", r.Successes}, {"errors", r.Errors}, {"timeouts", r.Timeouts}, {"latency.count", r.LatencyCount}} {
		if c.v < 0 || c.v > MaxReportCount {
			return errorf(apierr.ErrInvalidArgument, "report for pool %q: %s %d is out of range [0, %d]; report more often", r.Pool, c.name, c.v, int64(MaxReportCount))
		}
	}
	switch {
	case r.LatencyCount > n:
		return errorf(apierr.ErrInvalidArgument, "report for pool %q: latency.count %d exceeds the %d outcomes reported", r.Pool, r.LatencyCount, n)
	case r.LatencySum < 0 || r.LatencyMax < 0:
		return errorf(apierr.ErrInvalidArgument, "report for pool %q: latency sum %v and max %v must not be negative", r.Pool, r.LatencySum, r.LatencyMax)
	case r.LatencyCount == 0 && (r.LatencySum != 0 || r.LatencyMax != 0):
		return errorf(apierr.ErrInvalidArgument, "report for pool %q: latency sum and max are set but latency.count is 0", r.Pool)
	case r.LatencyMax > r.LatencySum:
		return errorf(apierr.ErrInvalidArgument, "report for pool %q: latency max %v exceeds the sum %v", r.Pool, r.LatencyMax, r.LatencySum)
	}
	return nil
}

// bucket converts r to window counts.
func (r *OutcomeReport) bucket() outcomeBucket {
	return outcomeBucket{successes: r.Successes, errors: r.Errors, timeouts: r.Timeouts,
		latN: r.LatencyCount, latSum: r.LatencySum, latMax: r.LatencyMax}
}

// outcomeBucketOf is one outcome with an optional latency (0: none).
func outcomeBucketOf(o Outcome, latency time.Duration) outcomeBucket {
	var b outcomeBucket
	switch o {
	case OutcomeSuccess:
		b.successes = 1
	case OutcomeError:
		b.errors = 1
	case OutcomeTimeout:
		b.timeouts = 1
	}
	if latency > 0 {
		b.latN, b.latSum, b.latMax = 1, latency, latency
	}
	return b
}

// checkOutcome validates one outcome and its latency.
func checkOutcome(o Outcome, latency time.Duration) error {
	if o < OutcomeSuccess || o > OutcomeTimeout {
		return errorf(apierr.ErrInvalidArgument, "outcome %d is not one of success (1), error (2), timeout (3)", o)
	}
	if latency < 0 {
		return errorf(apierr.ErrInvalidArgument, "outcome latency %v is negative", latency)
	}
	return nil
}

// RecordOutcome counts one outcome of work under pool (latency 0: not
// measured) and, with adaptive control on, feeds it to the pool's window,
// which may cut or raise the effective limits. Errors: apierr.ErrPoolNotFound,
// apierr.ErrInvalidArgument, apierr.ErrShuttingDown.
func (e *Engine) RecordOutcome(pool string, o Outcome, latency time.Duration) error {
	if err := checkOutcome(o, latency); err != nil {
		return err
	}
	p, err := e.lookup(pool)
	if err != nil {
		return err
	}
	return p.record(outcomeBucketOf(o, latency))
}

// record adds b to p's outcomes and delivers what it caused.
func (p *pool) record(b outcomeBucket) error {
	p.mu.Lock()
	if p.deleted {
		p.unlock()
		return poolNotFound(p.name)
	}
	p.recordOutcomesLocked(b, p.e.clock.Now())
	p.unlock()
	return nil
}

// Report counts batches of outcomes, each for one pool, as RecordOutcome
// does. It checks the whole batch first (every pool named once and
// existing, every count in range) and then applies it, so a bad batch
// counts nothing. Errors: apierr.ErrInvalidArgument (more than MaxReportPools
// reports, a pool named twice, a count out of range), apierr.ErrPoolNotFound,
// apierr.ErrShuttingDown.
func (e *Engine) Report(reports []OutcomeReport) error {
	if len(reports) > MaxReportPools {
		return errorf(apierr.ErrInvalidArgument, "%d reports in one call; the most is %d: split the batch", len(reports), MaxReportPools)
	}
	pools := make([]*pool, len(reports))
	seen := make(map[string]struct{}, len(reports))
	for i := range reports {
		r := &reports[i]
		if err := ValidatePoolName(r.Pool); err != nil {
			return err
		}
		if _, dup := seen[r.Pool]; dup {
			return errorf(apierr.ErrInvalidArgument, "pool %q is reported twice in one call; add its counts together", r.Pool)
		}
		seen[r.Pool] = struct{}{}
		if err := r.check(); err != nil {
			return err
		}
		p, err := e.lookup(r.Pool)
		if err != nil {
			return err
		}
		pools[i] = p
	}
	for i, p := range pools {
		_ = p.record(reports[i].bucket()) // a pool deleted meanwhile counts nothing
	}
	return nil
}
