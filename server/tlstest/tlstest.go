// Package tlstest makes throwaway certificate authorities and certificates
// for tests of TLS and mutual TLS, at test time, so that no key is ever
// committed. Keys are ECDSA P-256; certificates are valid from an hour ago
// for a day.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that signs server and client certificates.
type CA struct {
	// Cert is the CA's self-signed certificate.
	Cert *x509.Certificate
	// CertPEM is Cert in PEM form, for a CA file.
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA returns a new CA named name, failing the test on error.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: creating CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parsing CA: %v", err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool returns a pool holding only the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue returns a certificate signed by the CA with subject common name cn
// and DNS names dnsNames, plus the IP addresses 127.0.0.1 and ::1 (so that
// a server on loopback can use it), usable both to serve and as a client
// certificate.
// An empty cn leaves the subject without a common name.
func (ca *CA) Issue(t testing.TB, cn string, dnsNames ...string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := ca.IssuePEM(t, cn, dnsNames...)
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return c
}

// IssuePEM is Issue returning the certificate and its key in PEM form.
func (ca *CA) IssuePEM(t testing.TB, cn string, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("tlstest: issuing %q: %v", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// Files holds the paths of PEM files written by WriteFiles.
type Files struct {
	// CA is the CA's certificate; Cert and Key are the issued
	// certificate and its private key.
	CA, Cert, Key string
}

// WriteFiles writes the CA's certificate and a certificate issued as by
// Issue, with its key, to PEM files in dir (named after cn).
func (ca *CA) WriteFiles(t testing.TB, dir, cn string, dnsNames ...string) Files {
	t.Helper()
	certPEM, keyPEM := ca.IssuePEM(t, cn, dnsNames...)
	f := Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, cn+".pem"),
		Key:  filepath.Join(dir, cn+"-key.pem"),
	}
	for path, data := range map[string][]byte{f.CA: ca.CertPEM, f.Cert: certPEM, f.Key: keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatalf("tlstest: %v", err)
		}
	}
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return n
}
