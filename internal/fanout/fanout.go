// Package fanout asks the other servers of a cluster for their part of a
// cluster-wide answer (the listings of AdminService, Envoy's rate-limit
// calls for pools led elsewhere): one connection per member, kept while it
// is a member; a bounded wait per part; at most one hop.
//
// A forwarded call carries the caller's "authorization" metadata
// unchanged and the metadata ScopeHeader: ScopeLocal. The receiver checks
// the caller's credentials as for any call (its authentication runs before
// anything reads the scope) and, seeing the scope, answers from its own
// shards only and forwards nothing: a call is forwarded at most once, and
// a caller that sends the header itself only narrows its own answer.
package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// The scope metadata of a forwarded call.
const (
	ScopeHeader = "tollgate-scope"
	ScopeLocal  = "local"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds each part of a fanned-out call.
	DefaultTimeout = 2 * time.Second
	// DefaultMaxInFlight bounds the fanned-out calls and watches in
	// progress on one server at once.
	DefaultMaxInFlight = 64
	// DefaultMaxPerCaller bounds those of one caller.
	DefaultMaxPerCaller = 8
)

// Config configures a Fanout.
type Config struct {
	// Self is this server's advertised address.
	Self string
	// Members returns the advertised addresses of the cluster's servers
	// now (Self among them or not).
	Members func() []string
	// DialOptions dial a member (its transport credentials, first).
	DialOptions []grpc.DialOption
	// Timeout bounds each part of a call (for a watch: until the member's
	// watch is open); 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the fanned-out calls and watches in progress at
	// once; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// MaxPerCaller bounds those of one caller; 0 means
	// DefaultMaxPerCaller.
	MaxPerCaller int
	// Log receives the parts that fail; nil discards them.
	Log *slog.Logger
}

// Fanout asks the other members of a cluster. It is safe for concurrent
// use.
type Fanout struct {
	cfg Config

	mu       sync.Mutex
	conns    map[string]*grpc.ClientConn
	closed   bool
	inFlight int
	callers  map[string]int // fan-outs in progress per caller
}

// New returns a Fanout for cfg.
func New(cfg Config) *Fanout {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxPerCaller <= 0 {
		cfg.MaxPerCaller = DefaultMaxPerCaller
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Fanout{cfg: cfg, conns: map[string]*grpc.ClientConn{}, callers: map[string]int{}}
}

// Self is this server's advertised address.
func (f *Fanout) Self() string { return f.cfg.Self }

// Timeout is the bound on each part.
func (f *Fanout) Timeout() time.Duration { return f.cfg.Timeout }

// Local reports whether the call of ctx was forwarded by another server
// (or marked so by its caller): it is answered from this server's shards
// only.
func Local(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return slices.Contains(md.Get(ScopeHeader), ScopeLocal)
}

// Outgoing returns the context of a forwarded call: ctx's cancellation,
// the caller's authorization metadata unchanged and the local scope;
// nothing else of the caller's metadata.
func Outgoing(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.Pairs(ScopeHeader, ScopeLocal)
	if auth := in.Get("authorization"); len(auth) > 0 {
		out.Set("authorization", auth...)
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// Peers returns the other members now, sorted, and closes the
// connections of the servers that are no longer members.
func (f *Fanout) Peers() []string {
	var peers []string
	for _, m := range f.cfg.Members() {
		if m != "" && m != f.cfg.Self && !slices.Contains(peers, m) {
			peers = append(peers, m)
		}
	}
	slices.Sort(peers)
	f.mu.Lock()
	var gone []*grpc.ClientConn
	for addr, cc := range f.conns {
		if !slices.Contains(peers, addr) {
			gone = append(gone, cc)
			delete(f.conns, addr)
		}
	}
	f.mu.Unlock()
	for _, cc := range gone {
		_ = cc.Close()
	}
	return peers
}

// Conn returns the connection to member addr, dialling it the first time.
func (f *Fanout) Conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, status.Error(codes.Unavailable, "the server is shutting down")
	}
	if cc := f.conns[addr]; cc != nil {
		return cc, nil
	}
	opts := append(slices.Clip(f.cfg.DialOptions),
		// A member that stops answering (frozen, cut off) ends the
		// watches forwarded to it within about 15 s; the servers accept
		// pings every 5 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	f.conns[addr] = cc
	return cc, nil
}

// Close closes every connection; later calls fail.
func (f *Fanout) Close() {
	f.mu.Lock()
	conns := f.conns
	f.conns, f.closed = map[string]*grpc.ClientConn{}, true
	f.mu.Unlock()
	for _, cc := range conns {
		_ = cc.Close()
	}
}

// Begin counts a fanned-out call or watch of caller (its client key) in
// progress until the returned release is called. Past MaxInFlight on the
// server, or MaxPerCaller for caller, it returns RESOURCE_EXHAUSTED
// naming the bound.
func (f *Fanout) Begin(caller string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var msg string
	switch {
	case f.inFlight >= f.cfg.MaxInFlight:
		msg = fmt.Sprintf("%d cluster-wide listings and watches are in progress on this server, the most it runs at once", f.cfg.MaxInFlight)
	case f.callers[caller] >= f.cfg.MaxPerCaller:
		msg = fmt.Sprintf("this client has %d cluster-wide listings and watches in progress on this server, the most one client may", f.cfg.MaxPerCaller)
	}
	if msg != "" {
		return nil, refuse.StatusOf(&apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonTooManyRequests,
			Message: msg + "; end one, or retry later"}, refuse.About{}).Err()
	}
	f.inFlight++
	f.callers[caller]++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.inFlight--
			if f.callers[caller]--; f.callers[caller] == 0 {
				delete(f.callers, caller)
			}
		})
	}, nil
}

// Part is one member's answer to a fanned-out call.
type Part[T any] struct {
	// Server is the member's advertised address.
	Server string
	// Resp is its answer when Err is nil.
	Resp T
	// Err is why it has no answer: its own error, or DeadlineExceeded
	// after the timeout.
	Err error
}

// Ask calls call on every peer at once, each with Outgoing(ctx) bounded
// by the timeout, and returns their parts in peers' order when all have
// answered or timed out.
func Ask[T any](ctx context.Context, f *Fanout, peers []string, call func(ctx context.Context, addr string, cc *grpc.ClientConn) (T, error)) []Part[T] {
	parts := make([]Part[T], len(peers))
	var wg sync.WaitGroup
	out := Outgoing(ctx)
	for i, addr := range peers {
		parts[i].Server = addr
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := f.Conn(addr)
			if err == nil {
				cctx, cancel := context.WithTimeout(out, f.cfg.Timeout)
				parts[i].Resp, err = call(cctx, addr, cc)
				cancel()
			}
			if err != nil {
				parts[i].Err = err
				if !NotLeader(err) {
					f.cfg.Log.Warn("a server of the cluster did not give its part of a listing", "server", addr, "err", err)
				}
			}
		}()
	}
	wg.Wait()
	return parts
}

// NotLeader reports whether err is a NOT_LEADER refusal: the member leads
// no shard the call concerns, so its part is empty, not missing.
func NotLeader(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == string(apierr.ReasonNotLeader) {
			return true
		}
	}
	return false
}

// Missing returns the servers of parts whose answer is missing: those
// that failed other than with NOT_LEADER.
func Missing[T any](parts []Part[T]) []string {
	var out []string
	for _, p := range parts {
		if p.Err != nil && !NotLeader(p.Err) {
			out = append(out, p.Server)
		}
	}
	return out
}

// List is one server's page of a listing: its first items after the page
// token, sorted, and whether more follow them.
type List[T any] struct {
	Items []T
	More  bool
}

// Merge returns the first size items of the lists, in order by cmp, and
// whether more follow. An item whose key an earlier one has is left out
// (the first list that has it wins: a pool listed by two servers during a
// move). A list with more after it holds its server's items up to its
// last only: the page ends there at the latest, so that the next page,
// asked after the page's last item, misses none of them.
func Merge[T any](lists []List[T], cmp func(a, b T) int, key func(T) string, size int) (page []T, more bool) {
	var all []T
	var cutoff *T
	seen := map[string]bool{}
	for _, l := range lists {
		if l.More && len(l.Items) > 0 {
			if last := l.Items[len(l.Items)-1]; cutoff == nil || cmp(last, *cutoff) < 0 {
				cutoff = &last
			}
			more = true
		}
		for _, it := range l.Items {
			if k := key(it); !seen[k] {
				seen[k] = true
				all = append(all, it)
			}
		}
	}
	slices.SortStableFunc(all, cmp)
	if cutoff != nil {
		n, _ := slices.BinarySearchFunc(all, *cutoff, func(a, b T) int {
			if cmp(a, b) <= 0 {
				return -1
			}
			return 1
		})
		all = all[:n]
	}
	if len(all) > size {
		return all[:size], true
	}
	return all, more
}
