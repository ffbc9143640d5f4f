package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/internal/envoyrls"
	"github.com/tollgate/tollgate/limiter"
)

// callerEnv names the environment variable that makes this test binary a
// caller process of TestExactPerKeyAcrossProcesses: "mode address".
const callerEnv = "TOLLGATE_ENVOYRLS_CALLER"

// The pools of TestExactPerKeyAcrossProcesses, with rates in whole tokens
// per second so that the bound is checked in integers.
var exactPools = []limiter.PoolConfig{
	// Few buckets that refill slowly: the flood of new addresses fills
	// the table at once and keeps it full.
	{Name: "edge-ip", Rate: 1, Burst: 5, Envoy: limiter.EnvoyRule{Domain: "edge",
		Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}, MaxBuckets: 40}},
	// Fast buckets that several processes hit at once.
	{Name: "edge-user", Rate: 400, Burst: 10, Envoy: limiter.EnvoyRule{Domain: "edge",
		Descriptors: []limiter.EnvoyDescriptorKey{{Key: "user"}, {Key: "path"}}, MaxBuckets: 1000}},
}

// Every value's bucket is exact whatever other callers send: callers in
// separate processes hammer a few values of each pool, from several
// goroutines each (also with value lists that would collide if joined
// without lengths), while another floods new values, and the test changes
// the rules' max_buckets meanwhile. Over every window between two passes
// of one value, the server's decisions (read at the time of each
// decision) passed at most rate × window + burst hits, with no tolerance.
func TestExactPerKeyAcrossProcesses(t *testing.T) {
	eng := limiter.New(limiter.Options{})
	t.Cleanup(eng.Close)
	for _, p := range exactPools {
		if _, err := eng.CreatePool(p); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu        sync.Mutex
		decisions []envoyrls.Decision
	)
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, envoyrls.New(envoyrls.One(eng), envoyrls.Options{Decided: func(d envoyrls.Decision) {
		mu.Lock()
		decisions = append(decisions, d)
		mu.Unlock()
	}}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	modes := []string{"flood", "steady", "steady", "steady"}
	errs := make(chan error, len(modes))
	for _, mode := range modes {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCallerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), callerEnv+"="+mode+" "+lis.Addr().String())
		go func() {
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%s caller: %v\n%s", mode, err, out)
			}
			errs <- err
		}()
	}
	// Change the rules while the callers run: the buckets stay, and a
	// table one bucket too large drops one.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i, done := 0, 0; done < len(modes); {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
			done++
		case <-tick.C:
			i++
			for _, p := range exactPools {
				if _, err := eng.UpdatePool(p.Name, func(c *limiter.PoolConfig) { c.Envoy.MaxBuckets = p.Envoy.MaxBuckets - int64(i%2) }); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	srv.Stop()

	mu.Lock()
	defer mu.Unlock()
	byKey := make(map[[2]string][]envoyrls.Decision)
	overflow := 0
	for _, d := range decisions {
		if d.Overflow {
			overflow++
		}
		if d.OK {
			k := [2]string{d.Pool, d.Key}
			byKey[k] = append(byKey[k], d)
		}
	}
	if overflow == 0 {
		t.Fatalf("no decision was made on the overflow bucket in %d: the flood did not fill the table", len(decisions))
	}
	t.Logf("%d decisions, %d from the overflow bucket, %d values passed", len(decisions), overflow, len(byKey))
	for k, oks := range byKey {
		var p limiter.PoolConfig
		for _, p = range exactPools {
			if p.Name == k[0] {
				break
			}
		}
		if err := checkWindows(oks, int64(p.Rate), p.Burst); err != nil {
			t.Errorf("pool %s, value %q: %v", k[0], k[1], err)
		}
	}
}

// checkWindows checks that over every window from one pass to another,
// the hits passed are at most rate × window + burst: passes at t_i..t_j
// hold hits ≤ rate·(t_j − t_i) + burst, in integer nanoseconds.
func checkWindows(oks []envoyrls.Decision, rate, burst int64) error {
	slices.SortStableFunc(oks, func(a, b envoyrls.Decision) int { return a.At.Compare(b.At) })
	for i := range oks {
		var hits int64
		for j := i; j < len(oks); j++ {
			hits += oks[j].Hits
			window := oks[j].At.Sub(oks[i].At).Nanoseconds()
			if hits*int64(time.Second) > rate*window+burst*int64(time.Second) {
				return fmt.Errorf("%d hits passed in %v (passes %d to %d of %d); the most is %d/s × window + %d", hits, time.Duration(window), i, j, len(oks), rate, burst)
			}
		}
	}
	return nil
}

// TestCallerProcess is a caller of TestExactPerKeyAcrossProcesses, run as
// a process of its own; it does nothing otherwise.
func TestCallerProcess(t *testing.T) {
	arg := os.Getenv(callerEnv)
	if arg == "" {
		t.Skip("run by TestExactPerKeyAcrossProcesses")
	}
	var mode, addr string
	if _, err := fmt.Sscan(arg, &mode, &addr); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(hits uint32, ds ...*commonv3.RateLimitDescriptor) {
		if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds}); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	switch mode {
	case "flood": // 6,000 new addresses, 16 to a request, from 2 goroutines
		pid := strconv.Itoa(os.Getpid())
		for g := range 2 {
			wg.Go(func() {
				for r := range 188 {
					ds := make([]*commonv3.RateLimitDescriptor, 16)
					for i := range ds {
						ds[i] = desc("remote_address", fmt.Sprintf("flood-%s-%d-%d-%d", pid, g, r, i))
					}
					call(0, ds...)
				}
			})
		}
	case "steady": // 4 goroutines on the same few values, 400 requests each
		for g := range 4 {
			wg.Go(func() {
				for r := range 400 {
					call(uint32(1+r%2),
						desc("remote_address", fmt.Sprintf("steady-%d", r%3)),
						desc("user", "a\x00b", "path", "c"),
						desc("user", "a", "path", "b\x00c"),
						desc("user", fmt.Sprintf("u%d", g%2), "path", "/"))
				}
			})
		}
	default:
		t.Fatalf("mode %q", mode)
	}
	wg.Wait()
}
