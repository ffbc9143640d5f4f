// Package limits bounds what clients can make the server hold: the
// Limits a server is started with, the per-caller and server-wide counts
// (Quotas) that enforce them, the per-client request rate (Rates) and the
// listener that bounds connections. Past a limit, it returns a
// RESOURCE_EXHAUSTED engine error that names the limit and the serve flag
// that raises it.
//
// It knows callers only by the client keys internal/auth makes; the
// server's interceptors and services call it. It may import the engine
// (limiter), for its errors, and internal/auth, to describe client keys;
// nothing of the server.
package limits

import (
	"fmt"
	"time"
)

// Default abuse limits; see Limits.
const (
	DefaultMaxPools          = 10_000
	DefaultMetricsPools      = 10_000
	DefaultMaxWaiters        = 100_000
	DefaultMaxClientLeases   = 10_000
	DefaultMaxClientSessions = 256
	DefaultMaxRecvMsgSize    = 1 << 20
	DefaultClientRate        = 10_000
	DefaultMaxConns          = 8192
	DefaultMaxConnsPerIP     = 1024
	DefaultMaxHeaderListSize = 64 << 10
	DefaultMaxTakeWait       = 5 * time.Minute
	DefaultMaxStreams        = 16_384
	DefaultMaxStreamsPerIP   = 2_048
	DefaultMaxConnStreams    = 1_024
	DefaultMaxHTTPConns      = 1_024
	DefaultMaxHTTPConnsPerIP = 64
	// DefaultFileReserve is the least number of file descriptors
	// FitFiles keeps out of the listeners' reach, for the store, etcd,
	// logs and the process's other files.
	DefaultFileReserve = 256
)

// Limits bounds what clients can make the server hold, so that no client,
// buggy or hostile, can grow its memory without bound or crowd out the
// others. In every field, 0 means the default and a negative value means
// no limit. Past a limit, calls fail with RESOURCE_EXHAUSTED and a message
// that names the limit and the serve flag that raises it.
//
// "A client" is the caller's authenticated identity (the first name of its
// verified client certificate, or the admin token) when it has one.
// Otherwise, for ClientRate and MaxClientSessions it is the caller's
// connection (its address and port), and for MaxClientLeases the
// client_id of the acquire (or of the Session stream's hello), falling
// back to the connection; MaxConnsPerIP bounds the connections of one
// address. Unauthenticated clients choose their client_id, so on a server
// without authentication MaxClientLeases is a guard against bugs rather
// than against abuse; the server-wide MaxWaiters holds either way.
type Limits struct {
	// MaxPools bounds the pools CreatePool may bring the server to
	// (default DefaultMaxPools; flag --max-pools). Pools declared at start
	// are not refused, but count.
	MaxPools int
	// MetricsPools bounds the pools that have per-pool series on /metrics
	// (default DefaultMetricsPools; flag --metrics-pools): the gauges and
	// counters of the first MetricsPools pools in name order, and the
	// wait- and hold-time histograms of at most MetricsPools pools (the
	// first to observe one). tollgate_pools_unexported counts the others.
	MetricsPools int
	// MaxWaiters bounds the acquires and takes in progress, waiting or
	// about to be granted, across all pools and clients (default
	// DefaultMaxWaiters; flag --max-waiters). Each pool's max_waiters
	// bounds its own queue as well.
	MaxWaiters int64
	// MaxClientLeases bounds the leases one client holds plus its
	// acquires in progress (default DefaultMaxClientLeases; flag
	// --max-client-leases).
	MaxClientLeases int64
	// MaxClientSessions bounds the Session streams one client has open at
	// once (default DefaultMaxClientSessions; flag --max-client-sessions).
	MaxClientSessions int64
	// MaxRecvMsgSize bounds the size in bytes of one message the server
	// receives (default DefaultMaxRecvMsgSize; flag --max-msg-size). A
	// negative value leaves gRPC's own default of 4 MiB.
	MaxRecvMsgSize int
	// ClientRate bounds the requests per second of one client: unary calls,
	// Session requests and the descriptors of Envoy's ShouldRateLimit,
	// except releases and cancels, which only give capacity back (default
	// DefaultClientRate; flag --client-rate).
	ClientRate float64
	// ClientBurst is how many requests over ClientRate a client may make at
	// once; 0 means twice ClientRate (flag --client-burst).
	ClientBurst int
	// MaxConns bounds the connections open at once (default
	// DefaultMaxConns; flag --max-conns), and MaxConnsPerIP those from one
	// IP address (default DefaultMaxConnsPerIP; flag --max-conns-per-ip).
	// A connection past either is closed as soon as it is accepted.
	MaxConns, MaxConnsPerIP int
	// MaxStreams bounds the streams open at once across the server, and
	// MaxStreamsPerIP those of one IP address; every kind counts (Session,
	// health Watch, WatchEvents, reflection), as it does against
	// MaxClientSessions (defaults DefaultMaxStreams and
	// DefaultMaxStreamsPerIP; flags --max-streams, --max-streams-per-ip).
	MaxStreams, MaxStreamsPerIP int
	// MaxConnStreams bounds the streams and calls in progress on one
	// gRPC connection, its HTTP/2 MAX_CONCURRENT_STREAMS: a client past it
	// waits for one to end (default DefaultMaxConnStreams; flag
	// --max-conn-streams).
	MaxConnStreams int
	// MaxHTTPConns bounds the connections of the HTTP listener open at
	// once, and MaxHTTPConnsPerIP those from one IP address (defaults
	// DefaultMaxHTTPConns and DefaultMaxHTTPConnsPerIP; flags
	// --http-max-conns, --http-max-conns-per-ip).
	MaxHTTPConns, MaxHTTPConnsPerIP int
	// MaxHeaderListSize bounds the metadata of one call, in bytes
	// (default DefaultMaxHeaderListSize; flag --max-header-size).
	MaxHeaderListSize int
	// MaxTakeWait bounds the max_wait of a Take: a take that would wait
	// longer is refused with RESOURCE_EXHAUSTED (default
	// DefaultMaxTakeWait; flag --max-take-wait).
	MaxTakeWait time.Duration
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxPools == 0 {
		l.MaxPools = DefaultMaxPools
	}
	if l.MetricsPools == 0 {
		l.MetricsPools = DefaultMetricsPools
	}
	if l.MaxWaiters == 0 {
		l.MaxWaiters = DefaultMaxWaiters
	}
	if l.MaxClientLeases == 0 {
		l.MaxClientLeases = DefaultMaxClientLeases
	}
	if l.MaxClientSessions == 0 {
		l.MaxClientSessions = DefaultMaxClientSessions
	}
	if l.MaxRecvMsgSize == 0 {
		l.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if l.ClientRate == 0 {
		l.ClientRate = DefaultClientRate
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerIP == 0 {
		l.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if l.MaxHeaderListSize == 0 {
		l.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if l.MaxTakeWait == 0 {
		l.MaxTakeWait = DefaultMaxTakeWait
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = DefaultMaxStreams
	}
	if l.MaxStreamsPerIP == 0 {
		l.MaxStreamsPerIP = DefaultMaxStreamsPerIP
	}
	if l.MaxConnStreams == 0 {
		l.MaxConnStreams = DefaultMaxConnStreams
	}
	if l.MaxHTTPConns == 0 {
		l.MaxHTTPConns = DefaultMaxHTTPConns
	}
	if l.MaxHTTPConnsPerIP == 0 {
		l.MaxHTTPConnsPerIP = DefaultMaxHTTPConnsPerIP
	}
	if l.ClientBurst <= 0 && l.ClientRate > 0 {
		l.ClientBurst = max(1, int(2*l.ClientRate))
	}
	return l
}

// Validate reports a limit that cannot work, such as a burst too small for
// a single request; it is for the serve command's flags.
func (l Limits) Validate() error {
	if l.ClientRate > 0 && l.ClientBurst < 0 {
		return fmt.Errorf("--client-burst %d is negative; give 0 for twice --client-rate", l.ClientBurst)
	}
	if l.MaxRecvMsgSize > 0 && l.MaxRecvMsgSize < 1024 {
		return fmt.Errorf("--max-msg-size %d is below 1024 bytes; no request would fit", l.MaxRecvMsgSize)
	}
	if l.MaxHeaderListSize > 0 && l.MaxHeaderListSize < 4096 {
		return fmt.Errorf("--max-header-size %d is below 4096 bytes; ordinary calls would not fit", l.MaxHeaderListSize)
	}
	if l.MetricsPools < -1 {
		return fmt.Errorf("--metrics-pools %d: give a number of pools, or -1 for no bound", l.MetricsPools)
	}
	return nil
}

// FitFiles lowers MaxConns and MaxHTTPConns so that both listeners'
// connections together leave at least a reserve of the process's nofile
// file descriptors (RLIMIT_NOFILE) free: an eighth of them, and at least
// DefaultFileReserve. The HTTP listener gets at most an eighth of what
// the listeners may use, so that a flood of HTTP connections cannot take
// the descriptors gRPC clients need. It returns the limits and, when it
// lowered one, a sentence saying so (for the log).
func (l Limits) FitFiles(nofile int) (Limits, string) {
	if nofile <= 0 {
		return l, ""
	}
	budget := nofile - max(DefaultFileReserve, nofile/8)
	if budget < 16 {
		budget = 16
	}
	grpcConns, httpConns := l.MaxConns, l.MaxHTTPConns
	if httpConns < 0 || httpConns > budget/8 {
		httpConns = max(1, budget/8)
	}
	if grpcConns < 0 || grpcConns > budget-httpConns {
		grpcConns = budget - httpConns
	}
	if grpcConns == l.MaxConns && httpConns == l.MaxHTTPConns {
		return l, ""
	}
	msg := fmt.Sprintf("the process may open %d files (RLIMIT_NOFILE): --max-conns lowered from %d to %d and --http-max-conns from %d to %d, keeping %d descriptors in reserve; raise the limit (ulimit -n) for more",
		nofile, l.MaxConns, grpcConns, l.MaxHTTPConns, httpConns, nofile-grpcConns-httpConns)
	l.MaxConns, l.MaxHTTPConns = grpcConns, httpConns
	return l, msg
}
