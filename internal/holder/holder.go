// Package holder serves what a holder of leases and shares asks of the
// engine (LimiterService's acquire, release, renew, take, report, rate
// shares and concurrency shares) for both the unary calls and the Session
// stream: it validates the request off the wire, counts what it creates
// or ends against the limits (internal/limits), traces it, and calls the
// engine of the call's term (internal/term): each call or stream is
// served by Calls bound to the term it started in (In).
//
// It may import the engine (limiter), the wire types, internal/apiconv,
// internal/auth, internal/leaseid, internal/limits, internal/metrics,
// internal/poolconv, internal/refuse, internal/term, internal/tracing and
// OpenTelemetry's trace API; nothing of the server, which hands it what
// it needs in Calls.
package holder

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Calls is a holder's calls on the engine of one term. The server sets
// its exported fields once, and serves each call or stream with the
// Calls that In binds to the term it started in.
type Calls struct {
	// Auth returns the authorizer in force now.
	Auth    func() *auth.Authorizer
	Quotas  *limits.Quotas
	Limits  limits.Limits // with defaults filled in
	Metrics *metrics.Metrics
	IDs     *leaseid.IDs     // signs and checks the ids holders see
	Tracing *tracing.Tracing // nil: no spans
	Log     *slog.Logger

	term *term.Term // set by In: the calls use its engine only
}

// In returns c bound to t: its calls use t's engine, whatever term the
// server serves meanwhile.
func (c *Calls) In(t *term.Term) *Calls {
	b := *c
	b.term = t
	return &b
}

// Engine is the engine of the term c is bound to.
func (c *Calls) Engine() *limiter.Engine { return c.term.Engine() }

// Acquire validates req and acquires for a unary call, waiting while ctx
// allows. A lease granted when ctx is already done is released, so that
// the call reports its cancellation or deadline rather than a lease no one
// will use.
func (c *Calls) Acquire(ctx context.Context, req *tollgatev1.AcquireRequest) (limiter.Lease, error) {
	ar, err := apiconv.AcquireFromProto(req)
	if err != nil {
		return limiter.Lease{}, err
	}
	lease, wait, err := c.StartAcquire(ctx, ar, req.GetTraceContext())
	if wait.Waits() {
		lease, err = wait.Await(ctx)
	}
	if err != nil {
		return limiter.Lease{}, err
	}
	if cerr := ctx.Err(); cerr != nil {
		c.ReleaseQuietly(lease, "caller went away")
		return limiter.Lease{}, cerr
	}
	return lease, nil
}

// ReleaseQuietly releases a lease that was granted but could not be handed
// to its caller, logging (at debug) why.
func (c *Calls) ReleaseQuietly(lease limiter.Lease, why string) {
	err := c.ReleaseLease(lease.Pool, lease.FencingToken, nil)
	c.Log.Debug("released an undelivered lease", "pool", lease.Pool, "lease_id", lease.FencingToken, "why", why, "err", err)
}

// Release validates req and ends the lease, counting the outcome it
// carries, if any.
func (c *Calls) Release(req *tollgatev1.ReleaseRequest) error {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return err
	}
	tok, err := c.parseLeaseID(req.GetPool(), req.GetLeaseId())
	if err != nil {
		return err
	}
	out, err := apiconv.OutcomeFromProto(req.GetOutcome())
	if err != nil {
		return err
	}
	return c.ReleaseLease(req.GetPool(), tok, out)
}

// Renew validates req and extends the lease, making owner (if not nil) the
// one told about the lease's end, for client defaultClientID when req
// names none (a re-adopted lease's).
//
// A lease the renew re-adopted after a restart (or any lease the quotas
// do not know) starts counting against its client's lease limit here.
func (c *Calls) Renew(ctx context.Context, req *tollgatev1.RenewRequest, owner any, defaultClientID string) (limiter.Lease, error) {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return limiter.Lease{}, err
	}
	tok, err := c.parseLeaseID(req.GetPool(), req.GetLeaseId())
	if err != nil {
		return limiter.Lease{}, err
	}
	ttl, err := poolconv.Duration("ttl", req.GetTtl())
	if err != nil {
		return limiter.Lease{}, err
	}
	ra, err := readoptFromProto(req) // after a restart
	if err != nil {
		return limiter.Lease{}, err
	}
	if ra.Receipt, err = c.IDs.ParseReceipt(req.GetPool(), tok, req.GetExpiryReceipt(), ra.Resources); err != nil {
		return limiter.Lease{}, err
	}
	if ra.ClientID == "" {
		ra.ClientID = defaultClientID
	}
	lease, err := c.Engine().RenewOrReadopt(req.GetPool(), tok, ttl, owner, ra)
	if err == nil {
		c.Quotas.Track(lease.Pool, lease.FencingToken, func() string { return c.Auth().Identify(ctx).ClientKey(lease.ClientID) })
	}
	return lease, err
}

// Take validates req and takes tokens. The wait is max_wait if set, capped
// by the time left until ctx's deadline; with neither, the tokens must be
// available at once.
func (c *Calls) Take(ctx context.Context, req *tollgatev1.TakeRequest) (limiter.TakeResult, error) {
	pool, tokens, maxWait, err := takeArgs(ctx, req)
	if err != nil {
		return limiter.TakeResult{}, err
	}
	res, w, err := c.startTake(ctx, pool, tokens, maxWait, req.GetTraceContext())
	if w.Waits() {
		return w.Await(ctx)
	}
	return res, err
}

// StartTake is Take without the wait: it returns the outcome of a take
// that needs no wait, or else the wait (which Waits), whose outcome Await
// or Notify must then learn, once. ctx names the caller, and its deadline
// bounds the wait as Take's does.
func (c *Calls) StartTake(ctx context.Context, req *tollgatev1.TakeRequest) (limiter.TakeResult, Wait[limiter.TakeResult], error) {
	pool, tokens, maxWait, err := takeArgs(ctx, req)
	if err != nil {
		return limiter.TakeResult{}, Wait[limiter.TakeResult]{}, err
	}
	return c.startTake(ctx, pool, tokens, maxWait, req.GetTraceContext())
}

// takeArgs validates a take request and works out its wait: max_wait if
// set, capped by the time left until ctx's deadline.
func takeArgs(ctx context.Context, req *tollgatev1.TakeRequest) (pool string, tokens int64, maxWait time.Duration, err error) {
	if req == nil {
		req = &tollgatev1.TakeRequest{}
	}
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return "", 0, 0, err
	}
	if tokens, err = apiconv.CountArg("tokens", req.Tokens); err != nil {
		return "", 0, 0, err
	}
	if maxWait, err = poolconv.Duration("max_wait", req.GetMaxWait()); err != nil {
		return "", 0, 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		left := max(time.Until(dl), 0)
		if req.GetMaxWait() == nil || left < maxWait {
			maxWait = left
		}
	}
	if err := tracing.CheckContext(req.GetTraceContext()); err != nil {
		return "", 0, 0, err
	}
	return req.GetPool(), tokens, maxWait, nil
}

// StartAcquire is the engine's StartAcquire for ar, counted against
// Limits.MaxClientLeases (for the caller's client key) and
// Limits.MaxWaiters while it is in progress, its wait recorded in the
// pool's wait-time histogram when it is granted, and with tracing on in a
// span under the caller's trace context tc, ended with the outcome. It
// returns the outcome of an acquire that needs no wait, or else the wait
// (which Waits), whose outcome Await or Notify must then learn, once. ctx
// only names the caller (and parents the span). A granted lease counts
// against its client until ReleaseLease or the engine's OnLeaseEnded ends
// it. An unauthenticated caller chooses its client_id, so while it waits
// its acquire counts against its connection as well, like a take.
func (c *Calls) StartAcquire(ctx context.Context, ar limiter.AcquireRequest, tc map[string]string) (limiter.Lease, Wait[limiter.Lease], error) {
	var none Wait[limiter.Lease]
	ca := counted{calls: c, start: c.Engine().Clock().Now()}
	if c.Tracing != nil {
		_, ca.span = c.Tracing.Start(ctx, "tollgate.Acquire", tc, tracing.Pool(ar.Pool), tracing.AttrWeight.Int64(ar.Weight))
	}
	id := c.Auth().Identify(ctx)
	key, connKey := id.ClientKey(ar.ClientID), id.ClientKey("")
	if err := c.Quotas.BeginAcquire(key); err != nil {
		return limiter.Lease{}, none, ca.refused(err)
	}
	if connKey != key {
		if err := c.Quotas.BeginAcquire(connKey); err != nil {
			c.Quotas.EndAcquire(key, nil)
			return limiter.Lease{}, none, ca.refused(err)
		}
	}
	if err := c.Quotas.BeginWait(); err != nil {
		c.Quotas.EndAcquire(key, nil)
		if connKey != key {
			c.Quotas.EndAcquire(connKey, nil)
		}
		return limiter.Lease{}, none, ca.refused(err)
	}
	ca.key, ca.connKey = key, connKey
	lease, w, err := c.Engine().StartAcquire(ar)
	if w == nil {
		lease, err = ca.acquired(lease, err)
		return lease, none, err
	}
	return limiter.Lease{}, Wait[limiter.Lease]{w: w, c: ca, finish: counted.acquired}, nil
}

// Wait is an acquire of StartAcquire or a take of StartTake that waits
// (limiter.Wait), kept by value in whatever keeps the wait (one record per
// waiter). Its outcome comes with the counts and the span that StartAcquire
// or StartTake began ended: it finishes them itself.
type Wait[T limiter.Lease | limiter.TakeResult] struct {
	w      *limiter.Wait[T]
	c      counted
	finish func(counted, T, error) (T, error) // ends c given the outcome
}

// Waits reports whether the call waits (the zero Wait does not).
func (w *Wait[T]) Waits() bool { return w.w != nil }

// Await waits for the outcome as limiter.Wait.Await does.
func (w *Wait[T]) Await(ctx context.Context) (T, error) {
	v, err := w.w.Await(ctx)
	return w.finish(w.c, v, err)
}

// Notify has then called once with the outcome, with no lock held, as
// limiter.Wait.Notify does.
func (w *Wait[T]) Notify(then func(T, error)) {
	w.w.Notify(func(v T, err error) { then(w.finish(w.c, v, err)) })
}

// Cancel gives up the wait as limiter.Wait.Cancel does.
func (w *Wait[T]) Cancel(cause error) { w.w.Cancel(cause) }

// counted is an acquire or a take that StartAcquire or startTake counted
// against the limits and traced.
type counted struct {
	calls        *Calls
	key, connKey string // connKey is the key of an acquire's connection
	start        time.Time
	span         trace.Span // nil: not traced
	// A take's, for its refusal:
	pool   string
	tokens int64
	asked  time.Duration // the wait asked for, before Limits.MaxTakeWait
	capped bool          // the wait was cut to Limits.MaxTakeWait
}

// acquired ends the counts of an acquire's progress, and its span, given
// its outcome.
func (c counted) acquired(lease limiter.Lease, err error) (limiter.Lease, error) {
	q := c.calls.Quotas
	q.EndWait()
	if c.connKey != c.key {
		q.EndAcquire(c.connKey, nil)
	}
	if err != nil {
		q.EndAcquire(c.key, nil)
		return limiter.Lease{}, c.refused(err)
	}
	q.EndAcquire(c.key, &lease)
	waited := lease.AcquireTime.Sub(c.start)
	c.calls.Metrics.Waits.Observe(lease.Pool, waited)
	if c.span != nil {
		tracing.End(c.span, nil, tracing.AttrWaitMS.Float64(float64(waited)/1e6), tracing.AttrToken.Int64(int64(lease.FencingToken)))
	}
	return lease, nil
}

// refused ends the span of an acquire that failed with err, and returns
// err.
func (c counted) refused(err error) error {
	if c.span != nil {
		tracing.End(c.span, err, tracing.AttrWaitMS.Float64(float64(c.calls.Engine().Clock().Now().Sub(c.start))/1e6), tracing.AttrToken.Int64(0))
	}
	return err
}

// startTake calls the engine's StartTake, counted against
// Limits.MaxClientLeases (for the caller's client key, as an acquire is)
// and Limits.MaxWaiters while it is in progress, and with tracing on in a
// span under the caller's trace context tc, ended with the outcome. A
// maxWait past Limits.MaxTakeWait is cut to it, and a take refused only
// because of that cut says so.
func (c *Calls) startTake(ctx context.Context, pool string, tokens int64, maxWait time.Duration, tc map[string]string) (limiter.TakeResult, Wait[limiter.TakeResult], error) {
	var none Wait[limiter.TakeResult]
	ct := counted{calls: c, pool: pool, tokens: tokens, asked: maxWait}
	if c.Tracing != nil {
		_, ct.span = c.Tracing.Start(ctx, "tollgate.Take", tc, tracing.Pool(pool), tracing.AttrTokens.Int64(tokens))
	}
	key := c.Auth().Identify(ctx).ClientKey("")
	if err := c.Quotas.BeginAcquire(key); err != nil {
		return limiter.TakeResult{}, none, ct.tookSpan(limiter.TakeResult{}, err)
	}
	if err := c.Quotas.BeginWait(); err != nil {
		c.Quotas.EndAcquire(key, nil)
		return limiter.TakeResult{}, none, ct.tookSpan(limiter.TakeResult{}, err)
	}
	ct.key = key
	if most := c.Limits.MaxTakeWait; most > 0 && maxWait > most {
		maxWait, ct.capped = most, true
	}
	res, w, err := c.Engine().StartTake(pool, tokens, maxWait)
	if w == nil {
		res, err = ct.took(res, err)
		return res, none, err
	}
	return limiter.TakeResult{}, Wait[limiter.TakeResult]{w: w, c: ct, finish: counted.took}, nil
}

// took ends the counts of a take's progress, and its span, given its
// outcome; a take refused only because its wait was cut to
// Limits.MaxTakeWait says so.
func (ct counted) took(res limiter.TakeResult, err error) (limiter.TakeResult, error) {
	c := ct.calls
	c.Quotas.EndWait()
	c.Quotas.EndAcquire(ct.key, nil)
	if le := (*apierr.Error)(nil); ct.capped && errors.As(err, &le) && le.Reason == apierr.ReasonRateLimited && le.RetryAfter <= ct.asked {
		ce := c.Quotas.Exhausted(limits.KindTakeWait, le.Reason,
			"pool %q would have %d tokens in %v, longer than the server lets a take wait (%v, its --max-take-wait); retry after that, or ask the operator to raise --max-take-wait",
			ct.pool, ct.tokens, le.RetryAfter, c.Limits.MaxTakeWait)
		ce.RetryAfter = le.RetryAfter
		err = ce
	}
	return res, ct.tookSpan(res, err)
}

// tookSpan ends a take's span, if any, with its outcome, and returns err.
func (ct counted) tookSpan(res limiter.TakeResult, err error) error {
	if ct.span != nil {
		tracing.End(ct.span, err, tracing.AttrWaitMS.Float64(float64(res.Waited)/1e6))
	}
	return err
}

// ReleaseLease releases a lease on the engine, counting out (if not nil)
// as the engine's WithOutcome does, stops counting the lease against its
// client, and records how long it was held.
func (c *Calls) ReleaseLease(pool string, token uint64, out *limiter.ReleaseOutcome) error {
	var opts []limiter.ReleaseOption
	if out != nil {
		opts = append(opts, limiter.WithOutcome(out.Outcome, out.Latency))
	}
	lease, err := c.Engine().Release(pool, token, opts...)
	if err == nil {
		c.Quotas.LeaseEnded(pool, token)
		if !lease.AcquireTime.IsZero() { // zero: a pre-restart lease never re-adopted
			c.Metrics.Holds.Observe(pool, c.Engine().Clock().Now().Sub(lease.AcquireTime))
		}
	}
	return err
}

// Report validates req, checks that the caller may use every pool it
// names (a report can lower a pool's limits, so it needs the same right as
// an acquire), and counts it: each pool's report in the engine of the
// term in gives it (the term of its shard the call took), those of one
// term together; in nil means c's term for every pool.
func (c *Calls) Report(ctx context.Context, req *tollgatev1.ReportRequest, in func(pool string) *term.Term) error {
	rs, err := apiconv.ReportsFromProto(req)
	if err != nil {
		return err
	}
	if c.Auth().HasPolicy() {
		id := c.Auth().Identify(ctx)
		for _, r := range rs {
			if err := c.Auth().CheckPool(id, r.Pool); err != nil {
				return err
			}
		}
	}
	if in == nil {
		return c.Engine().Report(rs)
	}
	var terms []*term.Term // in the order their pools first come
	byTerm := make(map[*term.Term][]limiter.OutcomeReport)
	for _, r := range rs {
		t := in(r.Pool)
		if _, ok := byTerm[t]; !ok {
			terms = append(terms, t)
		}
		byTerm[t] = append(byTerm[t], r)
	}
	for _, t := range terms {
		if err := t.Engine().Report(byTerm[t]); err != nil {
			return err
		}
	}
	return nil
}

// AcquireShare validates req and grants the share, owned by owner (nil
// for unary calls; pushes go to it), for client defaultClientID when req
// names none.
func (c *Calls) AcquireShare(req *tollgatev1.AcquireShareRequest, owner any, defaultClientID string) (limiter.Share, error) {
	sr, err := apiconv.ShareRequestFromProto(req)
	if err != nil {
		return limiter.Share{}, err
	}
	if sr.ClientID == "" {
		sr.ClientID = defaultClientID
	}
	sr.Owner = owner
	return c.Engine().AcquireShare(sr)
}

// RefreshShare validates req and refreshes the share, making owner (if not
// nil) the one pushed its changes.
func (c *Calls) RefreshShare(req *tollgatev1.RefreshShareRequest, owner any) (limiter.Share, error) {
	sr, err := apiconv.ShareRefreshFromProto(c.IDs, req)
	if err != nil {
		return limiter.Share{}, err
	}
	sr.Owner = owner
	return c.Engine().RefreshShare(sr)
}

// ReleaseShare validates req and gives the share back.
func (c *Calls) ReleaseShare(req *tollgatev1.ReleaseShareRequest) error {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return err
	}
	id, err := c.IDs.ParseShare(req.GetPool(), req.GetShareId())
	if err != nil {
		return err
	}
	return c.Engine().ReleaseShare(req.GetPool(), id)
}

// ResizeLease validates req and resizes the lease, making owner the owner.
func (c *Calls) ResizeLease(req *tollgatev1.ResizeLeaseRequest, owner any) (limiter.Lease, error) {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return limiter.Lease{}, err
	}
	tok, err := c.parseLeaseID(req.GetPool(), req.GetLeaseId())
	if err != nil {
		return limiter.Lease{}, err
	}
	if req.Weight != nil && req.GetWeight() < 1 {
		return limiter.Lease{}, refuse.InvalidArg("weight %d is invalid; a lease holds at least 1 permit (release it to give back the last one)", req.GetWeight())
	}
	if req.Want != nil && req.GetWant() < 1 {
		return limiter.Lease{}, refuse.InvalidArg("want %d is invalid; a share wants at least 1 permit", req.GetWant())
	}
	return c.Engine().ResizeLease(limiter.LeaseResize{Pool: req.GetPool(), Token: tok, Weight: req.GetWeight(), Want: req.GetWant(), Owner: owner})
}

// parseLeaseID is ids.Parse for a holder's call on pool, except that
// an id refused in a pool that does not exist reports the missing pool,
// which says more.
func (c *Calls) parseLeaseID(pool, id string) (uint64, error) {
	tok, err := c.IDs.Parse(pool, id)
	if err != nil && errors.Is(err, apierr.ErrLeaseNotFound) {
		if _, perr := c.Engine().GetPool(pool); perr != nil {
			return 0, perr
		}
	}
	return tok, err
}

// readoptFromProto reads what a renew says about its lease, for a server
// restarted since the grant (limiter.Engine.RenewOrReadopt). An unset
// weight is 0: such a lease cannot be re-adopted.
func readoptFromProto(r *tollgatev1.RenewRequest) (limiter.Readopt, error) {
	ra := limiter.Readopt{ClientID: r.GetClientId(), Description: r.GetDescription(), Priority: r.GetPriority(), Resources: r.GetResourceIds()}
	if n := len(ra.Resources); n > limiter.MaxResourcesPerPool {
		return ra, refuse.InvalidArg("resource_ids has %d ids; a lease holds at most %d", n, limiter.MaxResourcesPerPool)
	}
	if r.Weight != nil {
		if r.GetWeight() < 1 {
			return ra, refuse.InvalidArg("weight is %d; it must be the lease's weight, at least 1 (or leave it unset)", r.GetWeight())
		}
		ra.Weight = r.GetWeight()
	}
	return ra, nil
}
