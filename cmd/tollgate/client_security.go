package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/auth"
)

// clientSecurity are the global flags for talking to a server that uses
// TLS, mutual TLS or an admin token.
type clientSecurity struct {
	ca, cert, key string
	tokenFile     string
}

// register adds the flags to the root command's persistent flags.
func (c *clientSecurity) register(pf *pflag.FlagSet) {
	pf.StringVar(&c.ca, "tls-ca", "", "connect over TLS, verifying the server with this PEM CA bundle (serve: see its own --tls-* flags)")
	pf.StringVar(&c.cert, "tls-cert", "", "connect over TLS, presenting this PEM client certificate (for a server with --client-ca)")
	pf.StringVar(&c.key, "tls-key", "", "PEM private key of --tls-cert")
	pf.StringVar(&c.tokenFile, "token-file", "", `file holding the admin token, sent as "authorization: Bearer <token>"`)
}

// tlsConfig returns the TLS configuration the --tls-* flags ask for, or
// nil when they ask for none (plaintext).
func (c *clientSecurity) tlsConfig() (*tls.Config, error) {
	if c.ca == "" && c.cert == "" && c.key == "" {
		return nil, nil
	}
	if (c.cert == "") != (c.key == "") {
		return nil, usageErrorf("--tls-cert and --tls-key go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.ca != "" {
		pool, err := auth.LoadCertPool(c.ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	if c.cert != "" {
		cert, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, fmt.Errorf("loading --tls-cert %s and --tls-key %s: %w", c.cert, c.key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// dialer returns the client settings the flags ask for.
func (c *clientSecurity) dialer() (client.Dialer, error) {
	var d client.Dialer
	cfg, err := c.tlsConfig()
	if err != nil {
		return d, err
	}
	d.TLS = cfg
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return d, fmt.Errorf("--token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return d, fmt.Errorf("--token-file %s is empty", c.tokenFile)
		}
		d.GRPCOptions = append(d.GRPCOptions, grpc.WithPerRPCCredentials(bearerToken(tok)))
	}
	return d, nil
}

// adminRefused reports whether err is a server's refusal of an admin call
// to a caller that is not an admin (UNAUTHENTICATED or PERMISSION_DENIED):
// commands that make one only as a check go on without it.
func adminRefused(err error) bool {
	c := status.Code(err)
	return c == codes.Unauthenticated || c == codes.PermissionDenied
}

// bearerToken sends "authorization: Bearer <token>" with every call. It
// allows plaintext, for a server on loopback; use TLS anywhere else.
type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }
