package main

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is an OTLP trace collector on loopback that keeps the names of
// the spans it receives.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names map[string]int
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.names[s.GetName()]++
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) has(names ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		if c.names[n] == 0 {
			return false
		}
	}
	return true
}

// TestServeExportsTraces: serve --otel sends its spans to the OTLP
// endpoint the standard variables name.
func TestServeExportsTraces(t *testing.T) {
	col := &collector{names: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }() // it returns when Stop is called
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // milliseconds between exports

	addr, _ := startServe(t, "--otel")
	runCLI(t, addr, "pool", "create", "api", "--rate", "10").mustSucceed(t)
	runCLI(t, addr, "take", "api").mustSucceed(t)

	want := []string{"tollgate.v1.AdminService/CreatePool", "tollgate.Take"}
	deadline := time.Now().Add(cliWaitLimit)
	for !col.has(want...) {
		if time.Now().After(deadline) {
			col.mu.Lock()
			t.Fatalf("the collector got spans %v; want %v among them", col.names, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
