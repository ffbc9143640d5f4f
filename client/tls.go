package client

import (
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithTLS makes the client connect over TLS with cfg: set cfg.RootCAs to
// the CA that signed the server's certificate (nil means the system's
// roots), and cfg.Certificates to present a client certificate to a server
// that requires mutual TLS. cfg.ServerName defaults to the host of the
// address dialed. The client does not modify cfg.
//
// It is WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg))),
// and like it overrides the default plaintext transport.
func WithTLS(cfg *tls.Config) Option {
	return WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}
