package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
)

// TLS is the TLS setup of a server's two listeners, loaded by
// LoadTLS.
type TLS struct {
	// GRPC is for the gRPC listener: with a client CA it requires and
	// verifies a client certificate on every connection (mutual TLS).
	GRPC *tls.Config
	// HTTP is for the HTTP listener: with a client CA it verifies a client
	// certificate when one is given, so that probes of /healthz and
	// /readyz need none; the other paths require one (see the server's
	// HTTPHandler).
	HTTP *tls.Config
	// ClientCerts reports that a client CA was given.
	ClientCerts bool
	// Peer is for this server's calls to the other servers of its cluster
	// (the cluster-wide listings, Envoy calls for pools led elsewhere): it
	// presents the server's own certificate as a client certificate, and
	// verifies theirs against the system's roots and the client CAs.
	Peer *tls.Config

	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate] // served to new connections; Reload replaces it
}

// LoadTLS loads the server's certificate and key (PEM files) and, if
// clientCAFile is not empty, the PEM bundle of CAs that sign client
// certificates. TLS 1.2 is the oldest version accepted. The certificate
// and key can be read again while the server runs (Reload); the client
// CAs are read once: changing them needs a restart.
func LoadTLS(certFile, keyFile, clientCAFile string) (*TLS, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
	}
	out := &TLS{certFile: certFile, keyFile: keyFile}
	if err := out.Reload(); err != nil {
		return nil, err
	}
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return out.cert.Load(), nil }
	base := &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12}
	out.GRPC, out.HTTP = base.Clone(), base.Clone()
	out.Peer = &tls.Config{MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return out.cert.Load(), nil }}
	if clientCAFile != "" {
		pool, err := LoadCertPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, err
		}
		roots.AppendCertsFromPEM(pem)
		out.Peer.RootCAs = roots
		out.GRPC.ClientCAs, out.GRPC.ClientAuth = pool, tls.RequireAndVerifyClientCert
		out.HTTP.ClientCAs, out.HTTP.ClientAuth = pool, tls.VerifyClientCertIfGiven
		out.ClientCerts = true
	}
	return out, nil
}

// Reload reads the certificate and key files again and serves the pair to
// the connections made from now on (open connections keep theirs). On
// error (a missing file, a key that does not match) the pair in use stays.
func (t *TLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return fmt.Errorf("loading the TLS certificate %s and key %s: %w", t.certFile, t.keyFile, err)
	}
	t.cert.Store(&cert)
	return nil
}

// LoadCertPool reads a PEM bundle of CA certificates.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CA certificates: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s has no PEM certificate (it should hold one or more \"-----BEGIN CERTIFICATE-----\" blocks)", file)
	}
	return pool, nil
}
