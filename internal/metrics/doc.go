// Package metrics owns the server's Prometheus registry: the standard
// gRPC server metrics (grpc_server_*, and the deprecated
// tollgate_grpc_server_* for one release) kept by its interceptors, the
// Session request counters, the per-pool wait- and hold-time histograms,
// and a collector that reads the engine's pools and the server's counters
// at scrape time.
//
// It may import the engine (limiter), for the pools it reads, and
// internal/limits, for the refusal counters; nothing of the server, which
// hands it a Source.
package metrics
