package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// member is what both kinds of etcd offer.
type member interface {
	Endpoint() string
	Stop()
	Restart()
}

func TestPutGetAcrossRestart(t *testing.T) { testPutGetAcrossRestart(t, Start(t)) }

// TestProcessPutGetAcrossRestart runs the etcd binary (skipped without
// it, unless CI is set).
func TestProcessPutGetAcrossRestart(t *testing.T) {
	testPutGetAcrossRestart(t, StartProcess(t))
}

func testPutGetAcrossRestart(t *testing.T, e member) {
	put := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := put()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	e.Restart()
	got, err := put().Get(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("after restart /k = %v, want v", got.Kvs)
	}
}
