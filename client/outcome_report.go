package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// Outcome reports: work done under rate tokens (Take) or a share
// (Limiter) has no lease to release with its outcome, so the Client counts
// outcomes per pool and sends the counts in one Report on its Session
// stream every reportInterval.

const (
	// reportInterval is how often counted outcomes are sent.
	reportInterval = time.Second
	// maxReportPools bounds the pools counted between two reports; the
	// server takes at most 1000 per Report.
	maxReportPools = 1000
)

// rates is the Client's state for rate shares and outcome reports.
type rates struct {
	mu      sync.Mutex
	counts  map[string]*tollgatev1.PoolReport // outcomes not yet sent, by pool
	started bool                              // the report loop runs
	dropped bool                              // logged that counts were dropped
	shares  map[shareKey]*Limiter             // live shares, for pushed events
}

// Report counts one outcome of work under pool, for the pool's adaptive
// limits, and sends it with others in the background (once a second, on
// the Client's stream): o is OutcomeSuccess, OutcomeError or
// OutcomeTimeout (OutcomeCanceled, or any other value, is not reported),
// latency how long the work took (0: not measured). Use it for work under
// Take or a Limiter; Do reports by itself. Report never blocks. Counts
// that cannot be sent (the server is unreachable) are kept and sent later;
// counts for a pool the server does not know are dropped.
func (c *Client) Report(pool string, o Outcome, latency time.Duration) {
	if o != OutcomeSuccess && o != OutcomeError && o != OutcomeTimeout {
		return
	}
	r := &c.rates
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = make(map[string]*tollgatev1.PoolReport)
	}
	pr := r.counts[pool]
	if pr == nil {
		if len(r.counts) >= maxReportPools {
			if !r.dropped {
				r.dropped = true
				c.log.Warn("tollgate: outcomes of too many pools to report at once; dropping some", "max", maxReportPools)
			}
			return
		}
		pr = &tollgatev1.PoolReport{Pool: pool}
		r.counts[pool] = pr
	}
	addOutcome(pr, o, latency)
	if !r.started {
		r.started = c.goBackground(c.reportLoop)
	}
}

// addOutcome counts one outcome into pr.
func addOutcome(pr *tollgatev1.PoolReport, o Outcome, latency time.Duration) {
	switch o {
	case OutcomeSuccess:
		pr.Successes++
	case OutcomeError:
		pr.Errors++
	case OutcomeTimeout:
		pr.Timeouts++
	}
	if latency > 0 {
		if pr.Latency == nil {
			pr.Latency = &tollgatev1.LatencySummary{Sum: durationpb.New(0), Max: durationpb.New(0)}
		}
		pr.Latency.Count++
		pr.Latency.Sum = durationpb.New(pr.Latency.Sum.AsDuration() + latency)
		if latency > pr.Latency.Max.AsDuration() {
			pr.Latency.Max = durationpb.New(latency)
		}
	}
}

// mergeReport adds the counts of b into a (both for the same pool).
func mergeReport(a, b *tollgatev1.PoolReport) {
	a.Successes += b.Successes
	a.Errors += b.Errors
	a.Timeouts += b.Timeouts
	if b.Latency != nil {
		if a.Latency == nil {
			a.Latency = &tollgatev1.LatencySummary{Sum: durationpb.New(0), Max: durationpb.New(0)}
		}
		a.Latency.Count += b.Latency.Count
		a.Latency.Sum = durationpb.New(a.Latency.Sum.AsDuration() + b.Latency.Sum.AsDuration())
		a.Latency.Max = durationpb.New(max(a.Latency.Max.AsDuration(), b.Latency.Max.AsDuration()))
	}
}

// reportLoop sends the counted outcomes every reportInterval until the
// Client is closed.
func (c *Client) reportLoop(ctx context.Context) {
	t := time.NewTicker(reportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.flushReports(ctx)
	}
}

// flushReports sends what is counted. Counts are kept for the next try if
// the server cannot be reached, and dropped if it refuses them; a batch
// refused as a whole (one unknown pool) is retried pool by pool so that
// the others still count.
func (c *Client) flushReports(ctx context.Context) {
	r := &c.rates
	r.mu.Lock()
	batch := make([]*tollgatev1.PoolReport, 0, len(r.counts))
	for _, pr := range r.counts {
		batch = append(batch, pr)
	}
	clear(r.counts)
	r.mu.Unlock()
	for _, b := range c.byShard(batch) {
		c.flushBatch(ctx, b)
	}
}

// byShard splits a batch of reports by the shard of their pools when the
// cluster has several (each goes to its shard's owner); else it is one.
func (c *Client) byShard(batch []*tollgatev1.PoolReport) [][]*tollgatev1.PoolReport {
	r := c.routes.Load()
	if len(batch) == 0 || r == nil || r.count <= 1 {
		return [][]*tollgatev1.PoolReport{batch}
	}
	groups := make(map[int][]*tollgatev1.PoolReport)
	for _, pr := range batch {
		i := shard.Of(pr.GetPool(), r.count)
		groups[i] = append(groups[i], pr)
	}
	out := make([][]*tollgatev1.PoolReport, 0, len(groups))
	for _, g := range groups {
		out = append(out, g)
	}
	return out
}

// flushBatch sends one batch of reports of pools of one shard.
func (c *Client) flushBatch(ctx context.Context, batch []*tollgatev1.PoolReport) {
	if len(batch) == 0 {
		return
	}
	err := c.sendReports(ctx, batch)
	var e *Error
	switch {
	case err == nil:
	case errors.As(err, &e) && e.Code != codes.Unavailable && len(batch) > 1:
		for _, pr := range batch {
			if err := c.sendReports(ctx, []*tollgatev1.PoolReport{pr}); err != nil {
				c.keepReports([]*tollgatev1.PoolReport{pr}, err)
			}
		}
	default:
		c.keepReports(batch, err)
	}
}

// sendReports sends one Report, waiting at most reportInterval.
func (c *Client) sendReports(ctx context.Context, batch []*tollgatev1.PoolReport) error {
	ctx, cancel := context.WithTimeout(ctx, reportInterval)
	defer cancel()
	_, err := c.roundTrip(ctx, op{pool: batch[0].GetPool(), build: func(int) (*tollgatev1.SessionRequest, error) {
		return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_Report{Report: &tollgatev1.ReportRequest{Reports: batch}}}, nil
	}})
	return err
}

// keepReports puts back counts that could not be sent because the server
// could not be reached, to send them later; counts the server refused are
// dropped (and logged).
func (c *Client) keepReports(batch []*tollgatev1.PoolReport, err error) {
	var e *Error
	if errors.As(err, &e) && e.Code != codes.Unavailable {
		c.log.Debug("tollgate: the server refused an outcome report; dropping it", "err", err)
		return
	}
	r := &c.rates
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pr := range batch {
		if cur := r.counts[pr.Pool]; cur != nil {
			mergeReport(cur, pr)
		} else if len(r.counts) < maxReportPools {
			r.counts[pr.Pool] = pr
		}
	}
}
