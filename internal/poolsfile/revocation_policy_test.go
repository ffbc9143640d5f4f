package poolsfile

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

func TestPoolsFileRevocationPolicy(t *testing.T) {
	pools, err := Parse("pools.yaml", []byte(`
pools:
  - name: a
    concurrency: 2
    revocation_policy: revoke
  - name: b
    concurrency: 2
    revocation_policy: wait
  - name: c
    concurrency: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	if pools[0].RevocationPolicy != limiter.RevocationRevoke || pools[1].RevocationPolicy != limiter.RevocationWait || pools[2].RevocationPolicy != limiter.RevocationWait {
		t.Fatalf("pools = %+v", pools)
	}
	_, err = Parse("pools.yaml", []byte("pools:\n  - name: a\n    concurrency: 2\n    revocation_policy: kill\n"))
	if err == nil || !strings.Contains(err.Error(), "pools.yaml:4") || !strings.Contains(err.Error(), "wait or revoke") {
		t.Fatalf("bad policy: %v", err)
	}
}
