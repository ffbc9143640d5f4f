package server

import (
	"crypto/tls"
	"os"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/auth"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server/tlstest"
)

// SetAuth replaces the admin token for the calls that start after it: the
// old token is refused, the new one accepted, without a restart.
func TestSetAuthRotatesTheToken(t *testing.T) {
	const oldTok, newTok = "0123456789abcdef-old-token", "0123456789abcdef-new-token"
	o := startOps(t, Config{Auth: &auth.Config{AdminToken: oldTok}}, nil)
	before, after := o.env(withToken(oldTok)), o.env(withToken(newTok))
	before.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	_, err := after.adm.GetPool(after.ctx(), &tollgatev1.GetPoolRequest{Name: "db"})
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "not the server's admin token")

	o.srv.SetAuth(&auth.Config{AdminToken: newTok})
	if _, err := after.adm.GetPool(after.ctx(), &tollgatev1.GetPoolRequest{Name: "db"}); err != nil {
		t.Fatalf("the new token after SetAuth: %v", err)
	}
	_, err = before.adm.GetPool(before.ctx(), &tollgatev1.GetPoolRequest{Name: "db"})
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "not the server's admin token")
}

// Reload serves a renewed certificate to new connections; a bad file
// leaves the certificate in use.
func TestServerTLSReload(t *testing.T) {
	ca := tlstest.NewCA(t, "reload CA")
	dir := t.TempDir()
	f := ca.WriteFiles(t, dir, "server", "localhost")
	st, err := auth.LoadTLS(f.Cert, f.Key, "")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := st.GRPC.GetCertificate(&tls.ClientHelloInfo{})
	// Renew: write a new pair over the files.
	renewed := ca.WriteFiles(t, t.TempDir(), "server", "localhost")
	for src, dst := range map[string]string{renewed.Cert: f.Cert, renewed.Key: f.Key} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	second, _ := st.HTTP.GetCertificate(&tls.ClientHelloInfo{})
	if string(second.Certificate[0]) == string(first.Certificate[0]) {
		t.Fatal("Reload kept the old certificate")
	}
	if err := os.WriteFile(f.Key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Reload(); err == nil {
		t.Fatal("Reload accepted a broken key")
	}
	if cur, _ := st.GRPC.GetCertificate(&tls.ClientHelloInfo{}); string(cur.Certificate[0]) != string(second.Certificate[0]) {
		t.Fatal("a failed Reload changed the certificate in use")
	}
}
