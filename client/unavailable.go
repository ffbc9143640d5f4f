package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// This file is the caller's choice of what a call that starts work does
// when the server cannot be reached: wait for it (the default), fail at
// once, or (for Do and the helpers built on it) run under a local limit
// only. Renewals and releases are not affected: they always retry until
// their lease's local deadline or their context ends.

// ErrUnavailable matches the error of a call that gave up because the
// server could not be reached, under FailWhenUnavailable or LocalLimitOnly.
// Such errors also carry gRPC code UNAVAILABLE (status.Code works on them).
var ErrUnavailable = errors.New("tollgate: server unavailable")

type unavailableKind uint8

const (
	waitForServer unavailableKind = iota
	failWhenUnavailable
	localLimitOnly
)

// UnavailablePolicy says what a call that starts work (Acquire, TryAcquire,
// Take, Wait, Do, and the Group, Map and Wrap helpers built on Do) does when
// the server cannot be reached. Make one with WaitForServer,
// FailWhenUnavailable or LocalLimitOnly and set it as
// Dialer.Unavailable. The zero value is WaitForServer.
//
// "Cannot be reached" means: the client has no live Session stream and its
// gRPC connection reports TRANSIENT_FAILURE (every address of the target
// refused or timed out; on loopback a refused connection shows within
// milliseconds, an unanswered one after the 5s connect timeout; with
// several addresses, also when none reports SERVING: no leader), or the
// server answered the call itself with UNAVAILABLE (shutting down,
// recovering, storage failed).
type UnavailablePolicy struct {
	kind  unavailableKind
	limit int64
}

// WaitForServer is the default policy: a call waits for the server (and
// reconnects, failing over between addresses) for as long as its context
// allows, then returns ctx.Err(). Work stays globally limited; callers
// wait out an outage.
func WaitForServer() UnavailablePolicy { return UnavailablePolicy{kind: waitForServer} }

// FailWhenUnavailable makes a call that starts work fail at once with an
// error matching ErrUnavailable when the server cannot be reached, instead
// of waiting. Use it when the caller has something better to do (serve a
// cached answer, shed the request) than wait.
func FailWhenUnavailable() UnavailablePolicy { return UnavailablePolicy{kind: failWhenUnavailable} }

// LocalLimitOnly makes Do (and Group, Map and Wrap) run their work anyway
// when the server cannot be reached, under a semaphore of n permits local
// to this Client: at most n weight of such runs at once in this process.
// These runs are NOT globally limited: every process that falls back runs
// its own n, so the protected system may see n times the number of
// processes. Each such run is logged at WARN on the Client's logger, is
// reported to the Observer with WorkEvent.LocalOnly set, and runs without a
// lease (LeaseFromContext returns nil, so there is no fencing token).
//
// Acquire, TryAcquire, Take and Wait cannot run anything locally; under
// this policy they fail as under FailWhenUnavailable. n must be at least 1
// (Dial refuses other values); a run whose WithWeight exceeds n fails with an
// error matching apierr.ErrInvalidArgument.
func LocalLimitOnly(n int64) UnavailablePolicy {
	return UnavailablePolicy{kind: localLimitOnly, limit: n}
}

// String returns "wait-for-server", "fail-when-unavailable" or
// "local-limit-only(n)".
func (p UnavailablePolicy) String() string {
	switch p.kind {
	case failWhenUnavailable:
		return "fail-when-unavailable"
	case localLimitOnly:
		return fmt.Sprintf("local-limit-only(%d)", p.limit)
	}
	return "wait-for-server"
}

// failsWhenUnreachable reports whether calls that start work give up when
// the server cannot be reached.
func (p UnavailablePolicy) failsWhenUnreachable() bool { return p.kind != waitForServer }

// unavailableError is an error matching ErrUnavailable, with code
// UNAVAILABLE.
type unavailableError struct{ cause error }

// Error returns "tollgate: server unavailable: <cause>".
func (e *unavailableError) Error() string {
	return "tollgate: server unavailable: " + e.cause.Error()
}

// Unwrap makes errors.Is match ErrUnavailable and the cause.
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// GRPCStatus makes status.Code report UNAVAILABLE.
func (e *unavailableError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// currentFor returns the link's live stream for a request: for a request
// that starts work under a policy that does not wait, it gives up with an
// error matching ErrUnavailable once the server cannot be reached;
// otherwise it is current, bounded by linkWait on a server's link.
func (ln *link) currentFor(ctx context.Context, o op) (*stream, error) {
	if !o.failIfUnreachable {
		return ln.currentBounded(ctx, o.pool)
	}
	c := ln.c
	c.mu.Lock()
	st := ln.cur
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		ln.cancelWhenUnreachable(wctx, cancel)
	}()
	st, err := ln.currentBounded(wctx, o.pool)
	cancel(nil)
	<-watched
	if err != nil && ctx.Err() == nil {
		if cause := context.Cause(wctx); errors.Is(cause, ErrUnavailable) {
			return nil, cause
		}
	}
	return st, err
}

// cancelWhenUnreachable watches the link's connection state until ctx
// ends, and cancels ctx with an error matching ErrUnavailable when the
// connection reports TRANSIENT_FAILURE. It asks an idle connection to
// connect, so that the answer does not wait for the session loop's next
// attempt.
func (ln *link) cancelWhenUnreachable(ctx context.Context, cancel context.CancelCauseFunc) {
	c := ln.c
	for {
		s := ln.conn.GetState()
		switch s {
		case connectivity.TransientFailure:
			cause := fmt.Errorf("cannot connect to %s (connection state %s)", ln.conn.CanonicalTarget(), s)
			if ln == c.main && c.cluster != nil {
				cause = fmt.Errorf("no leader among %s could be reached: none answers, or none reports tollgate.v1.LimiterService SERVING", strings.Join(c.cluster, ", "))
			}
			cancel(&unavailableError{cause: cause})
			return
		case connectivity.Idle:
			ln.conn.Connect()
		case connectivity.Shutdown:
			return // the Client is closed (current says so) or the link retired
		}
		if !ln.conn.WaitForStateChange(ctx, s) {
			return
		}
	}
}

// unavailableAnswer turns a server's UNAVAILABLE answer into an error that
// also matches ErrUnavailable.
func unavailableAnswer(e *Error) error {
	return &unavailableError{cause: e}
}
