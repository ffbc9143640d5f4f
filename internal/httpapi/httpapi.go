package httpapi

import (
	"embed"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// webFiles are the status page's files: plain HTML, CSS and JavaScript,
// with no build step.
//
//go:embed web
var webFiles embed.FS

// Options are what the handler reads of the server.
type Options struct {
	// Terms are the terms the server serves now, one per shard (a server
	// of a cluster serves a new one for each term of each shard it
	// leads): a request about a pool takes its shard's term once and reads
	// that term's engine only; the list of pools reads those of the
	// shards it leads.
	Terms   *term.Table
	Metrics prometheus.Gatherer
	// Auth returns the authorizer in force; the handler asks it once,
	// when it is built.
	Auth         func() Authorizer
	Serving      func() bool // false once shutdown has started
	RecentEvents func() []events.Event
	// Leader is the advertised address ("" while none is known) and
	// epoch of the leader of a shard, told to a request for its pools on a
	// server of a cluster that does not lead it.
	Leader func(shard int) (leader string, epoch int64)
	// Self is this server's advertised address: the owner of the pools
	// it serves.
	Self string
	// Peers, on a server of a cluster, gives the other servers' part of
	// GET /api/pools: their pools after after, at most limit of each, in
	// name order, asked with r's credentials. Nil for a standalone server.
	Peers func(r *http.Request, after string, limit int) PeerPools
}

// PeerPools is the other servers' part of GET /api/pools (Options.Peers).
type PeerPools struct {
	// Lists are each server's pools, in name order, Owner set, and
	// whether it has more after them.
	Lists []fanout.List[Pool]
	// Total is the number of pools on the servers that answered.
	Total int
	// Unreachable are the servers that did not answer.
	Unreachable []string
}

// NotLeaderResponse is the JSON of a 503 from the pools' endpoints on a
// server of a cluster that does not lead it: its pools are read on the
// leader.
type NotLeaderResponse struct {
	Error  string `json:"error"`
	Reason string `json:"reason"` // NOT_LEADER
	Leader string `json:"leader,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
}

// Authorizer says whether HTTP callers need credentials and checks the
// admin token.
type Authorizer interface {
	HTTPNeedsCredentials() bool
	IsAdminToken(tok string) bool
	HTTPWays() string // the ways to authenticate, for a 401's message
}

type handler struct{ o Options }

// Handler returns the handler of the server's HTTP listener: the status
// page and its assets, the JSON API (/api/pools, /api/pools/{name}/leases,
// /api/events), /metrics, /healthz and /readyz, with the authentication
// that server.Server.HTTPHandler documents.
func Handler(o Options) http.Handler {
	return securityHeaders(newMux(o))
}

// Routes returns the patterns of Handler(o)'s routes, for a test that
// checks each is documented with its bounds.
func Routes(o Options) []string { return newMux(o).patterns }

// routeMux is a ServeMux that remembers its patterns.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

func newMux(o Options) *routeMux {
	h := &handler{o: o}
	mux := &routeMux{ServeMux: http.NewServeMux()}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if o.Serving() {
			writeText(w, http.StatusOK, "ready\n")
			return
		}
		writeText(w, http.StatusServiceUnavailable, "not ready: the server is shutting down\n")
	})
	prom := promhttp.HandlerFor(o.Metrics, promhttp.HandlerOpts{
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	})
	mux.Handle("GET /metrics", h.auth(prom))
	if o.Peers != nil {
		mux.Handle("GET /api/pools", h.auth(http.HandlerFunc(h.clusterPools)))
	} else {
		mux.Handle("GET /api/pools", h.auth(h.ledOnly(h.pools)))
	}
	mux.Handle("GET /api/pools/{name}/leases", h.auth(h.leaderOnly(h.poolLeases)))
	mux.Handle("GET /api/pools/{name}/waiters", h.auth(h.leaderOnly(h.poolWaiters)))
	mux.Handle("GET /api/events", h.auth(http.HandlerFunc(h.events)))
	mux.Handle("GET /assets/{name}", h.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// {name} is one path segment: it cannot leave web/.
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, webFiles, "web/"+r.PathValue("name"))
	})))
	mux.Handle("GET /{$}", h.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, webFiles, "web/index.html")
	})))
	return mux
}

// auth requires a verified client certificate or the admin token when
// the server's authorizer asks for credentials.
func (h *handler) auth(next http.Handler) http.Handler {
	auth := h.o.Auth()
	if !auth.HTTPNeedsCredentials() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		if scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); ok &&
			strings.EqualFold(scheme, "bearer") && auth.IsAdminToken(strings.TrimSpace(tok)) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
		writeText(w, http.StatusUnauthorized, "this endpoint needs credentials: "+auth.HTTPWays()+"\n")
	})
}

// leaderOnly serves a request about the pool {name} from the engine of
// the term its shard serves when it comes, and answers 503, with the
// shard's leader's address, when that term does not lead (a server of a
// cluster that does not lead it): such a server holds none of the shard's
// pools, and "not found" would read as "there is none".
func (h *handler) leaderOnly(next func(http.ResponseWriter, *http.Request, *limiter.Engine)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := h.o.Terms.ShardOf(r.PathValue("name"))
		if t := h.o.Terms.Shard(i).Get(); t.Leading() {
			next(w, r, t.Engine())
			return
		}
		h.notLeader(w, i)
	})
}

// ledOnly serves a request for the list of pools from the terms of the
// shards the server leads when it comes, and answers 503, naming shard 0's
// leader, when it leads none (a server of a cluster that leads no shard):
// an empty list would read as "there are none".
func (h *handler) ledOnly(next func(http.ResponseWriter, *http.Request, []*term.Term)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var led []*term.Term
		for _, t := range h.o.Terms.Served() {
			if t.Leading() {
				led = append(led, t)
			}
		}
		if len(led) == 0 {
			h.notLeader(w, 0)
			return
		}
		next(w, r, led)
	})
}

// notLeader answers 503 naming the leader of shard i.
func (h *handler) notLeader(w http.ResponseWriter, i int) {
	leader, epoch := h.o.Leader(i)
	what := "the cluster"
	if h.o.Terms.Len() > 1 {
		what = "shard " + strconv.Itoa(i) + " (of the pool's name, see docs/ha.md)"
	}
	resp := NotLeaderResponse{Reason: string(apierr.ReasonNotLeader), Leader: leader, Epoch: epoch,
		Error: "this server does not lead " + what + ": read the pools on the leader, " + leader + " (its gRPC address; its HTTP listener is where it was started with --http)"}
	if leader == "" {
		resp.Error = "this server does not lead " + what + " and no leader is known yet; retry in a moment"
	}
	w.Header().Set("Retry-After", "1")
	writeJSONStatus(w, http.StatusServiceUnavailable, resp)
}

// securityHeaders sets headers that keep the status page to itself: no
// inline scripts, no framing, no sniffing.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
