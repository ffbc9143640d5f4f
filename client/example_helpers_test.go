package client_test

import (
	"net"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// startServer starts a Tollgate server on a loopback port with pools, for
// the examples, which all run; it returns its address and a function that
// stops it. A real program dials a running server instead.
func startServer(pools ...limiter.PoolConfig) (addr string, stop func()) {
	srv := server.New(server.Config{})
	for _, p := range pools {
		if _, err := srv.Engine().CreatePool(p); err != nil {
			panic(err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	gs := srv.GRPCServer()
	go func() { _ = gs.Serve(lis) }()
	return lis.Addr().String(), func() {
		gs.Stop()
		srv.Close()
	}
}

// unreachableAddr returns a loopback address that nothing listens on (a
// port that was free a moment ago), for the examples of a server that
// cannot be reached.
func unreachableAddr() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		panic(err)
	}
	return addr
}
