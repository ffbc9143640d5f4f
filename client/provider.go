package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ProviderOption configures Client.NewProvider.
type ProviderOption func(*providerOptions)

type providerOptions struct {
	id        string
	ttl       time.Duration // 0: the server's default
	resources []Resource
}

// WithProviderTTL sets the provider's keep-alive: the server takes its
// instances out of the pool if it hears nothing from it for this long.
// The default is the server's (10s); 1s to 5m. The provider sends a
// keep-alive every TTL/3.
func WithProviderTTL(d time.Duration) ProviderOption {
	return func(o *providerOptions) { o.ttl = d }
}

// WithResources sets the instances the provider offers when it registers
// (more can be offered later with Offer).
func WithResources(rs ...Resource) ProviderOption {
	return func(o *providerOptions) { o.resources = append(o.resources, rs...) }
}

// Provider offers instances to a passive pool for as long as it lives:
// the instances are the pool's capacity, and leases bound to them are
// granted to other clients. It is returned by Client.NewProvider. If its
// stream breaks (the server restarted, the network failed), it registers
// again with the instances it offers, retrying with backoff; meanwhile its
// instances are not in the pool, and the leases on them were revoked.
// Its methods are safe for concurrent use.
type Provider struct {
	c    *Client
	pool string
	opts providerOptions

	ctx    context.Context // ends when the provider ends; its cause is Err
	cancel context.CancelCauseFunc
	ops    chan provideOp
	done   chan struct{} // closed when the run loop has returned

	mu        sync.Mutex
	resources []Resource // what it offers, as the server accepted it
	err       error
}

// provideOp is an offer or withdrawal handed to the run loop.
type provideOp struct {
	req   *tollgatev1.ProvideRequest
	reply chan provideReply
}

type provideReply struct {
	resp *tollgatev1.ProvideResponse
	err  error
}

// NewProvider registers a provider of the passive pool named pool, named
// id (unique among the pool's live providers, 1 to 128 characters of
// [A-Za-z0-9._:/-]), offering the WithResources instances. It returns once the server has accepted the registration, or with
// its error: an *Error for INVALID_ARGUMENT, NOT_FOUND (POOL_NOT_FOUND),
// FAILED_PRECONDITION (NOT_PASSIVE), ALREADY_EXISTS (PROVIDER_EXISTS,
// RESOURCE_EXISTS) and the like; ctx bounds only this first registration.
// Call Close to take the instances out of the pool.
func (c *Client) NewProvider(ctx context.Context, pool, id string, opts ...ProviderOption) (*Provider, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: NewProvider: the provider id is required", &Error{Code: codes.InvalidArgument, Reason: apierr.ReasonInvalidArgument})
	}
	o := providerOptions{id: id}
	for _, opt := range opts {
		opt(&o)
	}
	pctx, cancel := context.WithCancelCause(c.ctx)
	p := &Provider{c: c, pool: pool, opts: o, ctx: pctx, cancel: cancel, ops: make(chan provideOp), done: make(chan struct{}),
		resources: o.resources}
	first := make(chan error, 1)
	if !c.goBackground(func(context.Context) { p.run(first) }) {
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	select {
	case err := <-first:
		if err != nil {
			p.finish(err)
			<-p.done
			return nil, err
		}
		return p, nil
	case <-ctx.Done():
		p.finish(ctx.Err())
		<-p.done
		return nil, ctx.Err()
	}
}

// Done is closed when the provider has ended: by Close, by its Client's
// Close, or because the server refused to register it again.
func (p *Provider) Done() <-chan struct{} { return p.ctx.Done() }

// Err returns nil while the provider lives, then why it ended: ErrClosed
// after Close, or the server's refusal.
func (p *Provider) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Resources returns the instances the provider offers.
func (p *Provider) Resources() []Resource {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Resource(nil), p.resources...)
}

// Offer adds instances to the pool. While the provider is registering
// again after a broken stream, it waits for the new registration (as
// long as ctx allows). Errors: an *Error from the server (ALREADY_EXISTS
// RESOURCE_EXISTS, INVALID_ARGUMENT, RESOURCE_EXHAUSTED
// TOO_MANY_RESOURCES, CLIENT_RATE_LIMITED), ErrClosed, ctx's error, or an
// error saying the stream broke before the answer came (retry).
func (p *Provider) Offer(ctx context.Context, rs ...Resource) error {
	_, err := p.call(ctx, &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Offer{Offer: &tollgatev1.ProvideOffer{Resources: resourcesToProto(rs)}}})
	if err == nil {
		p.mu.Lock()
		p.resources = append(p.resources, rs...)
		p.mu.Unlock()
	}
	return err
}

// Withdraw takes instances the provider offered out of the pool: leases
// on them are revoked, or with wait run on until they end. Errors: as
// Offer's (NOT_FOUND RESOURCE_NOT_FOUND for an id it does not offer).
func (p *Provider) Withdraw(ctx context.Context, wait bool, ids ...string) error {
	_, err := p.call(ctx, &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Withdraw{Withdraw: &tollgatev1.ProvideWithdraw{Ids: ids, Wait: wait}}})
	if err == nil {
		gone := make(map[string]bool, len(ids))
		for _, id := range ids {
			gone[id] = true
		}
		p.mu.Lock()
		kept := p.resources[:0]
		for _, r := range p.resources {
			if !gone[r.ID] {
				kept = append(kept, r)
			}
		}
		p.resources = kept
		p.mu.Unlock()
	}
	return err
}

// Close ends the provider's stream: the server takes its instances out of
// the pool at once and revokes the leases on them. It waits for the
// stream to end and returns nil (or, if the provider had ended already,
// nothing more happens).
func (p *Provider) Close() error {
	p.finish(ErrClosed)
	<-p.done
	return nil
}

// finish ends the provider with err, once.
func (p *Provider) finish(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.cancel(err)
}

func (p *Provider) call(ctx context.Context, req *tollgatev1.ProvideRequest) (*tollgatev1.ProvideResponse, error) {
	op := provideOp{req: req, reply: make(chan provideReply, 1)}
	select {
	case p.ops <- op:
	case <-p.ctx.Done():
		return nil, p.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-op.reply:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err() // the answer is dropped; the offer may have been made
	}
}

// run keeps the provider registered until it ends: it serves one stream,
// and when the stream breaks, registers again after a backoff. The first
// registration's outcome goes to first.
func (p *Provider) run(first chan<- error) {
	defer close(p.done)
	attempt := 0
	for {
		registered, err := p.serve(first)
		if first != nil && !registered {
			return // Provide reports err and ends the provider
		}
		first = nil
		if p.ctx.Err() != nil {
			return
		}
		if permanentProvideError(err) {
			p.finish(err)
			p.c.log.Warn("tollgate: provider ended: the server refused to register it again", "pool", p.pool, "provider", p.opts.id, "err", err)
			return
		}
		if registered {
			attempt = 0
		}
		delay := provideBackoff.delay(attempt, time.Time{})
		p.c.log.Info("tollgate: provider stream broke; registering again", "pool", p.pool, "provider", p.opts.id, "err", err, "in", delay)
		if pause(p.ctx, p.ctx, delay) != nil {
			return
		}
		attempt++
	}
}

// permanentProvideError reports errors that registering again cannot
// cure. ALREADY_EXISTS is not one: the server may not yet have noticed
// that this provider's previous stream died.
func permanentProvideError(err error) bool {
	e, ok := FromError(err)
	if !ok {
		return false
	}
	switch e.Code {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// serve registers on a new stream and serves it until it breaks or the
// provider ends. It reports whether the registration succeeded; with
// first not nil, its outcome is sent there.
func (p *Provider) serve(first chan<- error) (bool, error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	stream, ln, err := p.register(ctx)
	if first != nil {
		first <- err
	}
	if err != nil {
		return false, err
	}

	resps := make(chan *tollgatev1.ProvideResponse)
	broke := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				broke <- err
				return
			}
			select {
			case resps <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	// brokeErr is why the stream broke, after a Send failed (the answers
	// that come meanwhile are dropped: the provider registers again).
	brokeErr := func() error {
		for {
			select {
			case err := <-broke:
				return err
			case <-resps:
			}
		}
	}
	ttl := p.opts.ttl
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	pending := map[uint64]chan provideReply{}
	defer func() {
		for _, reply := range pending {
			reply <- provideReply{err: fmt.Errorf("tollgate: provider %q lost its stream to the server before the answer came; it is registering again: retry", p.opts.id)}
		}
	}()
	var nextID uint64
	for {
		select {
		case <-p.ctx.Done():
			_ = stream.CloseSend()
			return true, nil
		case err := <-broke:
			return true, p.streamError(err, ln)
		case <-tick.C:
			if err := stream.Send(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_KeepAlive{KeepAlive: &tollgatev1.ProvideKeepAlive{}}}); err != nil {
				return true, p.streamError(brokeErr(), ln)
			}
		case op := <-p.ops:
			nextID++
			op.req.RequestId = nextID
			if err := stream.Send(op.req); err != nil {
				err = p.streamError(brokeErr(), ln)
				op.reply <- provideReply{err: err}
				return true, err
			}
			pending[nextID] = op.reply
		case r := <-resps:
			reply, ok := pending[r.GetRequestId()]
			if !ok {
				continue // a keep-alive's answer
			}
			delete(pending, r.GetRequestId())
			if pe := r.GetError(); pe != nil {
				reply <- provideReply{resp: r, err: &Error{Code: codes.Code(pe.GetCode()), Reason: apierr.Reason(pe.GetReason()), Message: pe.GetMessage()}}
				continue
			}
			reply <- provideReply{resp: r}
		}
	}
}

// register opens a Provide stream to the owner of the pool's shard and
// registers on it, following NOT_LEADER answers to the owner they name
// (as roundTrip does) while ctx allows. It returns the stream and its
// link once the server accepted the registration.
func (p *Provider) register(ctx context.Context) (tollgatev1.LimiterService_ProvideClient, *link, error) {
	for n := 0; ; n++ {
		ln := p.c.linkFor(p.pool)
		if ln == nil {
			ln = p.c.main // no owner known: a server names it
		}
		stream, err := p.registerOn(ctx, ln)
		if err == nil {
			return stream, ln, nil
		}
		e, ok := FromError(err)
		if !ok || !e.Is(apierr.ErrNotLeader) {
			return nil, nil, err
		}
		reroute, moved := p.c.noteNotLeader(p.pool, e, ln)
		if !reroute {
			return nil, nil, e
		}
		if err := p.c.rerouteWait(ctx, n, e, moved); err != nil {
			return nil, nil, e // the last answer says more than the provider's end
		}
	}
}

// registerOn opens a Provide stream on ln and registers on it; the
// error is the server's status when it ended the stream.
func (p *Provider) registerOn(ctx context.Context, ln *link) (tollgatev1.LimiterService_ProvideClient, error) {
	stream, err := ln.stub.Provide(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	reg := &tollgatev1.ProvideRegister{Pool: p.pool, ProviderId: p.opts.id, Resources: resourcesToProto(p.Resources())}
	if p.opts.ttl > 0 {
		reg.Ttl = durationpb.New(p.opts.ttl)
	}
	// A server that ended the stream at once (NOT_LEADER) makes Send fail
	// with io.EOF; Recv then returns its status.
	_ = stream.Send(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: reg}})
	if _, err := stream.Recv(); err != nil {
		return nil, statusError(err)
	}
	return stream, nil
}

// streamError is why a registered provider's stream broke (its Recv's
// error): the server's status as an *Error when it sent one, after
// noting a NOT_LEADER's hint, so that the next registration goes to the
// shard's owner.
func (p *Provider) streamError(err error, ln *link) error {
	err = statusError(err)
	if e, ok := err.(*Error); ok && e.Is(apierr.ErrNotLeader) {
		_, _ = p.c.noteNotLeader(p.pool, e, ln)
	}
	return err
}

// statusError returns err as an *Error when it carries a gRPC status.
func statusError(err error) error {
	if e, ok := FromError(err); ok {
		return e
	}
	return err
}
