// Package envoycompat tests that Tollgate's rate-limit service speaks
// Envoy's wire format: a real `tollgate serve --envoy-rls` answers a client
// built from Envoy's own generated types (go-control-plane). The server
// itself is built from the subset of Envoy's protos in proto/envoy, which
// has Envoy's names and numbers; this test, in a binary of its own (the
// two sets of types cannot be registered in one), is what holds the subset
// to them.
package envoycompat

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/internal/hatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	hatest.CleanBuilds()
	os.Exit(code)
}

func TestEnvoyClientTalksToTollgate(t *testing.T) {
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte("pools:\n  - name: edge-ip\n    rate: 1\n    burst: 3\n    envoy: {domain: edge, descriptors: [{key: remote_address}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := hatest.Build(t, "github.com/tollgate/tollgate/cmd/tollgate")
	addr := hatest.FreeAddr(t)
	srv := hatest.NewProc(t, "server", bin, "serve", "--listen", addr, "--http", "", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--config", pools, "--envoy-rls")
	srv.Start()
	srv.WaitListening(addr)

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(d *commonv3.RateLimitDescriptor, hits uint32) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}
	desc := func(value string) *commonv3.RateLimitDescriptor {
		return &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}}}
	}

	// The request's hits_addend: 2 of the burst of 3 pass, 2 more do not.
	if resp := ask(desc("10.0.0.1"), 2); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first 2 hits: %v", resp)
	}
	resp := ask(desc("10.0.0.1"), 2)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.GetStatuses()) != 1 {
		t.Fatalf("2 more hits: %v; want OVER_LIMIT with one status", resp)
	}
	st := resp.GetStatuses()[0]
	if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND ||
		st.GetCurrentLimit().GetRequestsPerUnit() != 1 || st.GetDurationUntilReset().AsDuration() <= 0 {
		t.Fatalf("the status, read with Envoy's types: %v", st)
	}
	// A descriptor's own hits_addend, and negative hits (answered OK,
	// taking nothing).
	d := desc("10.0.0.2")
	d.HitsAddend = wrapperspb.UInt64(3)
	if resp := ask(d, 1); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("3 hits of the descriptor's own: %v", resp)
	}
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
	if resp := ask(d, 1); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("negative hits: %v", resp)
	}
	if resp := ask(desc("10.0.0.2"), 1); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a 4th hit after 3 (and negative hits that took nothing): %v", resp)
	}
	// Hits above the burst can never pass, and the body Envoy sends says so.
	resp = ask(desc("10.0.0.3"), 4)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(string(resp.GetRawBody()), "no retry") {
		t.Fatalf("4 hits above the burst of 3: %v", resp)
	}
}
