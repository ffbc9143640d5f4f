// Package provide serves LimiterService's Provide stream: the stream of a
// provider of a passive pool. The provider lives as long as its stream:
// when the stream ends, the provider leaves the pool and its instances
// with it; when the engine expires the provider (nothing heard for its
// TTL), the stream is ended. The exception is the server's own shutdown:
// the stream ends with UNAVAILABLE and the provider stays, so that the
// leases on its instances are not revoked but re-adopted after the
// restart.
//
// It may import the engine (limiter), the wire types, internal/apiconv,
// internal/auth, internal/limits, internal/poolconv, internal/refuse and
// internal/term; nothing of the server, which it reaches through Host.
package provide

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Host is what a Provide stream needs of the server: the term of its
// pool's shard, when to end (the server drains, or that term ends) and
// the status to end with when it does not lead.
type Host interface {
	// Term is the term that serves the shard of pool now, which the
	// stream takes when its provider registers: the provider registers
	// with its engine, and the stream ends when it ends. When this server
	// does not lead the shard, it returns nil and the status to end the
	// stream with (NOT_LEADER naming the shard's leader).
	Term(pool string) (*term.Term, error)
	// Draining is closed when the server starts shutting down.
	Draining() <-chan struct{}
	// NotLeader is NOT_LEADER naming the leader of pool's shard.
	NotLeader(pool string) error
}

// Streams serves a server's Provide streams. Set its fields before the
// first Serve.
type Streams struct {
	Host Host
	// Auth returns the authorizer in force now.
	Auth   func() *auth.Authorizer
	Quotas *limits.Quotas // the request rate of offers and withdrawals
	Log    *slog.Logger
}

// providerStream is the Owner of a provider registered on a Provide
// stream: the engine hands it back in the provider's events.
type providerStream struct {
	// end ends the stream with its cause.
	end context.CancelCauseFunc
}

// Serve serves one provider's stream.
func (s *Streams) Serve(stream tollgatev1.LimiterService_ProvideServer) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	ctx, end := context.WithCancelCause(stream.Context())
	defer end(nil)
	h, t, err := s.registerProvider(ctx, first, &providerStream{end: end})
	if err != nil {
		return refuse.ToStatus(s.Log, "Provide", err, refuse.About{Pool: first.GetRegister().GetPool()})
	}
	left := "its Provide stream ended"
	defer func() {
		if left != "" {
			_ = h.Leave(left) // ErrProviderNotFound: it left already
		}
	}()
	info, err := h.Info()
	if err != nil {
		return refuse.ToStatus(s.Log, "Provide", err, refuse.About{Pool: first.GetRegister().GetPool()})
	}
	if err := stream.Send(&tollgatev1.ProvideResponse{RequestId: first.GetRequestId(), Provider: apiconv.ProviderToProto(info)}); err != nil {
		left = "its Provide stream broke"
		return err
	}

	// The reader hands messages to this goroutine, the stream's only
	// writer, one at a time.
	msgs := make(chan *tollgatev1.ProvideRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	pool := first.GetRegister().GetPool()
	rateKey := s.Auth().Identify(stream.Context()).ClientKey("")
	for {
		select {
		case <-ctx.Done():
			left = "its Provide stream ended"
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return refuse.ToStatus(s.Log, "Provide", cause, refuse.About{Pool: pool})
			}
			left = "its connection was lost"
			return stream.Context().Err()
		case <-t.Done():
			left = ""
			return s.Host.NotLeader(pool)
		case <-s.Host.Draining():
			// The server is shutting down, not the provider: its instances
			// are not taken away (that would revoke their holders' leases,
			// which a restarted server re-adopts); it registers again.
			left = ""
			return refuse.StatusOf(&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonShuttingDown,
				Message: "the server is shutting down; register again (on another server if there is one): the leases on your instances were not revoked"}, refuse.About{}).Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				left = "it closed its Provide stream"
				return nil
			}
			left = "its connection was lost"
			return err
		case m := <-msgs:
			resp, err := s.provideMessage(h, m, rateKey)
			if err != nil { // the provider is gone: end the stream with why
				return refuse.ToStatus(s.Log, "Provide", err, refuse.About{Pool: pool})
			}
			if err := stream.Send(resp); err != nil {
				left = "its Provide stream broke"
				return err
			}
		}
	}
}

// registerProvider checks the first message of a Provide stream and
// registers its provider with the engine of the term of its pool's shard,
// which it returns.
func (s *Streams) registerProvider(ctx context.Context, first *tollgatev1.ProvideRequest, owner *providerStream) (*limiter.Provider, *term.Term, error) {
	reg := first.GetRegister()
	if reg == nil {
		return nil, nil, refuse.InvalidArg("the first message of a Provide stream must be register (pool, provider_id, ttl)")
	}
	if err := apiconv.CheckPoolName("register.pool", reg.GetPool()); err != nil {
		return nil, nil, err
	}
	ttl, err := poolconv.Duration("register.ttl", reg.GetTtl())
	if err != nil {
		return nil, nil, err
	}
	id := s.Auth().Identify(ctx)
	if s.Auth().HasPolicy() {
		if err := s.Auth().CheckPool(id, reg.GetPool()); err != nil {
			return nil, nil, err
		}
	}
	t, err := s.Host.Term(reg.GetPool())
	if err != nil {
		return nil, nil, err
	}
	spec := limiter.ProviderSpec{ID: reg.GetProviderId(), Identity: id.Principal(), Address: id.Addr, TTL: ttl, Owner: owner}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		spec.Address = p.Addr.String()
	}
	if spec.Identity == "" {
		spec.Identity = spec.Address
	}
	p, err := t.Engine().RegisterProvider(reg.GetPool(), spec, apiconv.ResourcesFromProto(reg.GetResources()))
	return p, t, err
}

// provideMessage handles one message after the registration. A failed
// offer or withdrawal is answered with ProvideResponse.error; an error is
// returned only when the provider is gone.
func (s *Streams) provideMessage(h *limiter.Provider, m *tollgatev1.ProvideRequest, rateKey string) (*tollgatev1.ProvideResponse, error) {
	resp := &tollgatev1.ProvideResponse{RequestId: m.GetRequestId()}
	var (
		info limiter.ProviderInfo
		err  error
	)
	switch k := m.GetKind().(type) {
	case *tollgatev1.ProvideRequest_KeepAlive:
		info, err = h.KeepAlive()
	case *tollgatev1.ProvideRequest_Offer:
		if err = s.provideRate(rateKey); err == nil {
			info, err = h.Offer(apiconv.ResourcesFromProto(k.Offer.GetResources()))
		}
	case *tollgatev1.ProvideRequest_Withdraw:
		if err = s.provideRate(rateKey); err == nil {
			var r limiter.RemoveResult
			r, info, err = h.Withdraw(k.Withdraw.GetIds(), k.Withdraw.GetWait())
			resp.Removed, resp.Revoked = int64(r.Removed), int64(r.Revoked)
		}
	case *tollgatev1.ProvideRequest_Register:
		err = refuse.InvalidArg("this Provide stream is registered already, as provider %q; open another stream to register another provider", h.ID())
	default:
		err = refuse.InvalidArg("the message sets no kind; set offer, withdraw or keep_alive")
	}
	if errors.Is(err, apierr.ErrProviderNotFound) {
		return nil, err
	}
	if err != nil {
		le := refuse.Classify(s.Log, "Provide", err, refuse.About{})
		resp.Error = &tollgatev1.ProvideError{Code: int32(refuse.GRPCCode(le.Code)), Reason: string(le.Reason), Message: le.Message}
		if info, err = h.Info(); err != nil {
			return nil, err
		}
	}
	resp.Provider = apiconv.ProviderToProto(info)
	return resp, nil
}

// provideRate counts an offer or withdrawal toward the caller's request
// rate; keep-alives are exempt, so that a provider refused for its rate
// is not also expired.
func (s *Streams) provideRate(key string) error {
	if err := s.Quotas.AllowRate(key); err != nil {
		return err
	}
	return nil
}

// ProviderLeft ends the stream of a provider that left its pool other
// than by its stream's end (the engine expired it, or an operator took it
// away), with why.
func ProviderLeft(ev limiter.PoolEvent) {
	if ps, ok := ev.Owner.(*providerStream); ok && ev.Type == limiter.ProviderLeft {
		code, reason := apierr.CodeNotFound, apierr.ReasonProviderNotFound
		if ev.ProviderExpired {
			code, reason = apierr.CodeDeadlineExceeded, apierr.ReasonProviderExpired
		}
		ps.end(&apierr.Error{Code: code, Reason: reason, Message: ev.Message + "; register again to offer instances"})
	}
}
