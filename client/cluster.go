package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	_ "google.golang.org/grpc/health" // client-side health checking, for clusterServiceConfig
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is how a client of several servers (a cluster: one leader,
// followers that answer NOT_LEADER) reaches the leader: gRPC health
// checking routes calls to the server that reports the limiter service
// SERVING, and a call answered NOT_LEADER anyway (the leader changed
// between a health report and the call) is sent again after the answer's
// retry delay.

// clusterServiceConfig balances a list of addresses over the servers whose
// health reports tollgate.v1.LimiterService SERVING: the leader.
const clusterServiceConfig = `{
	"loadBalancingConfig": [{"round_robin": {}}],
	"healthCheckConfig": {"serviceName": "tollgate.v1.LimiterService"}
}`

// notLeaderPause returns the pause before sending again a call answered
// NOT_LEADER for the n-th time (from 0): the answer's retry delay, or the
// client's retry backoff when it gave none. ok is false for any other
// answer.
func notLeaderPause(err error, n int, deadline time.Time) (d time.Duration, ok bool) {
	e, isErr := FromError(err)
	if !isErr || !e.Is(apierr.ErrNotLeader) {
		return 0, false
	}
	if e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return retryBackoff.delay(n, deadline), true
}

// unaryInterceptor returns the interceptor of the unary calls of a client
// of the addresses of cluster (nil for one address): it sends a call
// answered NOT_LEADER again (retryNotLeader), and for a cluster, whose calls
// wait for a leader (grpc.WaitForReady), it says so when a call's deadline
// passes while no server is ready.
func unaryInterceptor(cluster []string) grpc.UnaryClientInterceptor {
	if cluster == nil {
		return retryNotLeader
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := retryNotLeader(ctx, method, req, reply, cc, invoker, opts...)
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil && cc.GetState() != connectivity.Ready {
			return status.Errorf(codes.DeadlineExceeded, "no leader among %s could be reached before the call's deadline: %s",
				strings.Join(cluster, ", "), status.Convert(err).Message())
		}
		return err
	}
}

// retryNotLeader is a unary interceptor that sends a call answered
// NOT_LEADER again, after the answer's retry delay, while the call's
// context allows: NOT_LEADER means nothing was applied, so every call is
// safe to send again. A call whose outcome is unknown (OUTCOME_UNKNOWN) is
// never sent again. When the next try could not start before the context's deadline,
// it returns the last NOT_LEADER answer, which names the leader.
func retryNotLeader(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	deadline, _ := ctx.Deadline()
	for n := 0; ; n++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		d, ok := notLeaderPause(err, n, deadline)
		if !ok || (!deadline.IsZero() && time.Until(deadline) <= d) {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// noteBreak records why the Session stream broke or could not open, and
// returns how long the server asked to wait before the next try: a
// NOT_LEADER answer's retry delay, or 0.
func (ln *link) noteBreak(err error) time.Duration {
	c := ln.c
	c.mu.Lock()
	ln.lastBreak = err
	c.mu.Unlock()
	if e, ok := FromError(err); ok && e.Is(apierr.ErrNotLeader) {
		return e.RetryAfter
	}
	return 0
}

// noLeaderError is the error of a call of a client of several servers
// whose context ended while no server could be reached as the leader. It
// matches the context's error.
type noLeaderError struct {
	ctxErr error
	addrs  []string
	last   error // why the last Session stream broke or could not open; may be nil
}

func (e *noLeaderError) Error() string {
	s := fmt.Sprintf("%v: no leader among %s could be reached (none reports tollgate.v1.LimiterService SERVING)", e.ctxErr, strings.Join(e.addrs, ", "))
	if te, ok := FromError(e.last); ok {
		s += "; last answer: " + te.Error()
	} else if e.last != nil {
		s += "; last error: " + e.last.Error()
	}
	return s
}

func (e *noLeaderError) Unwrap() error { return e.ctxErr }

// noServerError is the error of a call of a client of one server whose
// context ended while no Session stream to it could be opened. It matches
// the context's error.
type noServerError struct {
	ctxErr error
	target string
	last   error // why the last Session stream broke or could not open; may be nil
}

func (e *noServerError) Error() string {
	if te, ok := FromError(e.last); ok && te.Reason != "" {
		return fmt.Sprintf("%v: the server at %s did not open a session; last answer: %s", e.ctxErr, e.target, te.Error())
	}
	s := fmt.Sprintf("%v: no server answered at %s", e.ctxErr, e.target)
	if te, ok := FromError(e.last); ok {
		s += "; last connection error: " + te.Message
	} else if e.last != nil {
		s += "; last connection error: " + e.last.Error()
	}
	return s
}

func (e *noServerError) Unwrap() error { return e.ctxErr }

// waitEnded returns the error of a call whose context ended while it
// waited for a Session stream: ctx.Err(), wrapped in an error that names
// the server(s) and why the last stream could not open (*noServerError,
// or for a client of several servers *noLeaderError).
func (ln *link) waitEnded(ctx context.Context) error {
	c := ln.c
	c.mu.Lock()
	last := ln.lastBreak
	c.mu.Unlock()
	var be *brokenError
	if errors.As(last, &be) {
		last = be.cause
	}
	if c.cluster == nil || ln != c.main {
		if last == nil {
			last = ln.connectionError(ctx)
		}
		return &noServerError{ctxErr: ctx.Err(), target: ln.name(), last: last}
	}
	return &noLeaderError{ctxErr: ctx.Err(), addrs: c.cluster, last: last}
}

// connectionError returns why the connection cannot be made, while it is in
// TRANSIENT_FAILURE (the Session stream waits for it without an error of
// its own): the UNAVAILABLE answer of a call that does not wait for a
// connection, which carries gRPC's last connection error. It returns nil
// in any other state.
func (ln *link) connectionError(ctx context.Context) error {
	if ln.conn.GetState() != connectivity.TransientFailure {
		return nil
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 100*time.Millisecond)
	defer cancel()
	_, err := healthpb.NewHealthClient(ln.conn).Check(qctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		return nil
	}
	return err
}
