package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/server"
)

// minTokenLen is the shortest admin token serve accepts.
const minTokenLen = 16

// securityOptions are the flags of tollgate serve about TLS, who may call
// what, the HTTP listener and the abuse limits.
type securityOptions struct {
	httpAddr            string
	tlsCert, tlsKey     string
	clientCA            string
	adminNames          []string
	adminTokenFile      string
	policyFile          string
	insecureAllowRemote bool
	limits              limits.Limits
}

// securityHelp is the part of serve's help about security.
const securityHelp = `
Security. By default the server listens on loopback only (127.0.0.1), in
plaintext and without authentication: anyone who can connect may do
anything. serve refuses to listen on any other address (with --listen or
--http) unless TLS and authentication are set up: --tls-cert and --tls-key,
and either --client-ca (mutual TLS; --admin-names then says which client
certificates are admins) or --admin-token-file (admin calls need
"authorization: Bearer <token>"). --insecure-allow-remote lifts the refusal:
use it only on a network where every host is trusted. --policy restricts,
per client certificate, which pools LimiterService calls may use:

  rules:
    - clients: ["worker-*.orders.internal"]   # certificate names (CN or DNS SAN)
      pools: ["orders-*"]                     # "*" matches any characters

The HTTP listener (--http) serves a status page at /, JSON at /api/pools
and /api/events, Prometheus metrics at /metrics, and /healthz and /readyz
(503 once shutdown starts). With credentials configured, every path but
the two probes needs a verified client certificate or the admin token.

On SIGHUP, serve reads the TLS certificate and key, the admin token file
and the policy file again (what cannot be read stays as it was).

Limits keep one client from exhausting the server: each refusal is
RESOURCE_EXHAUSTED and names the flag that raises it (-1: no limit). See
docs/operations.md.`

// register adds the flags to f.
func (o *securityOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.httpAddr, "http", "127.0.0.1:7071", `address of the HTTP listener: status page, /metrics, /healthz, /readyz ("" disables it)`)
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain) of the server; with --tls-key, both listeners use TLS")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&o.clientCA, "client-ca", "", "PEM bundle of the CAs that sign client certificates: mutual TLS, every gRPC client must present one")
	f.StringSliceVar(&o.adminNames, "admin-names", nil, "client certificate names (CN or DNS SAN) allowed to call AdminService, comma-separated (needs --client-ca)")
	f.StringVar(&o.adminTokenFile, "admin-token-file", "", `file holding a bearer token allowed to call AdminService ("authorization: Bearer <token>"); at least 16 characters`)
	f.StringVar(&o.policyFile, "policy", "", "YAML file of which client certificates may use which pools (needs --client-ca; see above)")
	f.BoolVar(&o.insecureAllowRemote, "insecure-allow-remote", false, "allow listening on non-loopback addresses without TLS and authentication (trusted networks only)")
	f.IntVar(&o.limits.MaxPools, "max-pools", limits.DefaultMaxPools, "most pools CreatePool may bring the server to (-1: no limit)")
	f.IntVar(&o.limits.MetricsPools, "metrics-pools", limits.DefaultMetricsPools, "most pools with per-pool series on /metrics: gauges and counters of the first pools in name order, histograms of the first to observe one (-1: no limit)")
	f.Int64Var(&o.limits.MaxWaiters, "max-waiters", limits.DefaultMaxWaiters, "most acquires and takes in progress across all pools (-1: no limit)")
	f.Int64Var(&o.limits.MaxClientLeases, "max-client-leases", limits.DefaultMaxClientLeases, "most leases one client may hold or be acquiring (-1: no limit)")
	f.Int64Var(&o.limits.MaxClientSessions, "max-client-sessions", limits.DefaultMaxClientSessions, "most streams (Session, health Watch, WatchEvents, reflection) one client may have open (-1: no limit)")
	f.IntVar(&o.limits.MaxRecvMsgSize, "max-msg-size", limits.DefaultMaxRecvMsgSize, "largest gRPC message the server receives, in bytes")
	f.Float64Var(&o.limits.ClientRate, "client-rate", limits.DefaultClientRate, "requests per second one client may make, releases excepted (-1: no limit)")
	f.IntVar(&o.limits.ClientBurst, "client-burst", 0, "requests one client may make at once above --client-rate (0: twice --client-rate)")
	f.IntVar(&o.limits.MaxConns, "max-conns", limits.DefaultMaxConns, "most gRPC connections open at once; a newcomer past it takes the place of a connection making no call, or is closed (-1: as many as the file descriptors allow)")
	f.IntVar(&o.limits.MaxConnsPerIP, "max-conns-per-ip", limits.DefaultMaxConnsPerIP, "most gRPC connections open at once from one IP address; a newcomer past it takes the place of one of the address's connections making no call, or is closed (-1: no limit)")
	f.IntVar(&o.limits.MaxHTTPConns, "http-max-conns", limits.DefaultMaxHTTPConns, "most HTTP connections open at once (-1: as many as the file descriptors allow)")
	f.IntVar(&o.limits.MaxHTTPConnsPerIP, "http-max-conns-per-ip", limits.DefaultMaxHTTPConnsPerIP, "most HTTP connections open at once from one IP address (-1: no limit)")
	f.IntVar(&o.limits.MaxStreams, "max-streams", limits.DefaultMaxStreams, "most gRPC streams open at once (Session, health Watch, WatchEvents, reflection) (-1: no limit)")
	f.IntVar(&o.limits.MaxStreamsPerIP, "max-streams-per-ip", limits.DefaultMaxStreamsPerIP, "most gRPC streams open at once from one IP address (-1: no limit)")
	f.IntVar(&o.limits.MaxConnStreams, "max-conn-streams", limits.DefaultMaxConnStreams, "most streams and calls in progress on one gRPC connection; more wait (-1: no limit)")
	f.IntVar(&o.limits.MaxHeaderListSize, "max-header-size", limits.DefaultMaxHeaderListSize, "largest metadata (headers) of one gRPC call, in bytes")
	f.DurationVar(&o.limits.MaxTakeWait, "max-take-wait", limits.DefaultMaxTakeWait, "longest max_wait a take may wait for its tokens; longer waits are refused (-1ns: no limit)")
}

// serveSecurity is what the flags load to: the server's TLS setup and
// auth.Config.
type serveSecurity struct {
	opts *securityOptions
	tls  *auth.TLS // nil: plaintext
	auth *auth.Config
}

// load reads the files the flags name and checks that they fit together.
func (o *securityOptions) load() (*serveSecurity, error) {
	s := &serveSecurity{opts: o, auth: &auth.Config{}}
	if err := o.limits.Validate(); err != nil {
		return nil, err
	}
	switch {
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return nil, fmt.Errorf("--tls-cert and --tls-key go together: give both, or neither for plaintext")
	case o.clientCA != "" && o.tlsCert == "":
		return nil, fmt.Errorf("--client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first")
	case len(o.adminNames) > 0 && o.clientCA == "":
		return nil, fmt.Errorf("--admin-names are client certificate names, which only --client-ca lets the server verify: set --client-ca, or use --admin-token-file")
	case o.policyFile != "" && o.clientCA == "":
		return nil, fmt.Errorf("--policy names client certificates, which only --client-ca lets the server verify: set --client-ca")
	}
	if o.tlsCert != "" {
		st, err := auth.LoadTLS(o.tlsCert, o.tlsKey, o.clientCA)
		if err != nil {
			return nil, err
		}
		s.tls = st
		s.auth.ClientCerts = st.ClientCerts
	}
	cfg, err := o.loadAuth(s.auth.ClientCerts)
	if err != nil {
		return nil, err
	}
	s.auth = cfg
	return s, nil
}

// loadAuth reads the admin token and policy files into an auth.Config with
// the admin names of the flags; clientCerts says whether the listeners
// verify client certificates. Serve calls it at start and on SIGHUP.
func (o *securityOptions) loadAuth(clientCerts bool) (*auth.Config, error) {
	cfg := &auth.Config{AdminNames: o.adminNames, ClientCerts: clientCerts}
	if o.adminTokenFile != "" {
		b, err := os.ReadFile(o.adminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < minTokenLen || strings.ContainsAny(tok, " \t\r\n") {
			return nil, fmt.Errorf("--admin-token-file %s must hold one token of at least %d characters without spaces (make one with: openssl rand -hex 32)", o.adminTokenFile, minTokenLen)
		}
		cfg.AdminToken = tok
	}
	if o.policyFile != "" {
		p, err := auth.LoadPolicyFile(o.policyFile)
		if err != nil {
			return nil, err
		}
		cfg.Policy = p
	}
	return cfg, nil
}

// secured reports whether remote clients would need TLS and credentials.
func (s *serveSecurity) secured() bool {
	return s.tls != nil && (s.auth.ClientCerts || s.auth.AdminToken != "")
}

// checkRemote refuses a listener on a non-loopback address unless the
// server is secured or --insecure-allow-remote is given. flag names the
// flag that chose the address, for the message.
func (s *serveSecurity) checkRemote(flag string, addr net.Addr) error {
	if isLoopback(addr) || s.secured() || s.opts.insecureAllowRemote {
		return nil
	}
	return fmt.Errorf("refusing to serve on %s (%s), which is not a loopback address, without TLS and authentication: "+
		"anyone who can reach it could change pools and hold every permit. Set --tls-cert and --tls-key, and --client-ca (with --admin-names) or --admin-token-file; "+
		"or listen on 127.0.0.1; or, on a network where every host is trusted, pass --insecure-allow-remote", addr, flag)
}

// isLoopback reports whether addr is a loopback IP address (an unspecified
// address such as 0.0.0.0 is every interface: not loopback).
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// config adds the security settings to cfg, with the connection limits
// fitted to the process's file descriptors (Limits.FitFiles; a lowered
// limit is logged).
func (s *serveSecurity) config(cfg server.Config) server.Config {
	cfg.Auth = s.auth
	if s.tls != nil {
		cfg.PeerDialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.tls.Peer))}
	}
	l, note := s.opts.limits.WithDefaults().FitFiles(openFilesLimit())
	if note != "" && cfg.Logger != nil {
		cfg.Logger.Warn(note)
	}
	cfg.Limits = l
	return cfg
}
