package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serve --envoy-rls answers Envoy's rate-limit API on --listen from the
// pools file's rules (a token per 100s: the second call is over the
// limit), pool get shows the rule, and without the flag the service is
// not there.
func TestServeEnvoyRLS(t *testing.T) {
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte("pools:\n  - name: edge-ip\n    rate: 0.01\n    envoy: {domain: edge, descriptors: [{key: remote_address}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}
	ask := func(addr string) (*rlsv3.RateLimitResponse, error) {
		return insecureCall(t, addr, func(ctx context.Context, conn *grpc.ClientConn) (*rlsv3.RateLimitResponse, error) {
			return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		})
	}

	addr, _ := startServe(t, "--config", pools, "--envoy-rls")
	for _, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := ask(addr)
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("ShouldRateLimit = %v, %v; want %v", resp, err, want)
		}
	}

	out := runCLI(t, addr, "pool", "get", "edge-ip").mustSucceed(t).stdout
	if !strings.Contains(out, "domain edge, descriptors [key remote_address], max_buckets 10000") {
		t.Fatalf("pool get does not show the rule:\n%s", out)
	}

	addr, _ = startServe(t, "--config", pools)
	if _, err := ask(addr); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without --envoy-rls: %v; want UNIMPLEMENTED", err)
	}
}
