// Package sharetest tests concurrency shares across processes: worker
// processes (this test binary, re-executed) share one pool through
// client.Semaphore against one server on loopback, and the test checks
// what they report from outside.
package sharetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// workerEnv makes the test binary run as a worker (see TestMain): its
// value is the worker's mode, and the arguments say the rest.
const workerEnv = "TOLLGATE_SHARETEST_WORKER"

const (
	pool  = "shared"
	limit = 6
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		if err := runWorker(mode, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startServer starts a server with the system clock on loopback, with
// pool's concurrency limit set to limit, and returns its address.
func startServer(t *testing.T) (*server.Server, string) {
	srv := server.New(server.Config{})
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: pool, ConcurrencyLimit: limit, MaxWaiters: 100}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.GRPCServer()
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		<-served
		srv.Close()
	})
	return srv, lis.Addr().String()
}

// worker is a worker process; its stdout is read line by line.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // closed at EOF
	errb  strings.Builder
}

func startWorker(t *testing.T, ctx context.Context, mode string, args ...string) *worker {
	w := &worker{cmd: exec.CommandContext(ctx, os.Args[0], args...), lines: make(chan string, 1<<16)}
	w.cmd.Env = append(os.Environ(), workerEnv+"="+mode)
	w.cmd.Stderr = &w.errb
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	})
	return w
}

// next returns the worker's next line.
func (w *worker) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			t.Fatalf("worker %v ended: %s", w.cmd.Args, w.errb.String())
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %v said nothing for 30s", w.cmd.Args)
		return ""
	}
}

// hold is one local hold a worker reports: from after its Acquire
// returned to before its Release, by the machine's wall clock.
type hold struct {
	start, end int64
	weight     int64
}

// TestSharesHoldThePoolLimitAcrossProcesses: three worker processes, each
// with a Semaphore of random WithLocalShare on one pool of limit 6, run tasks
// of weight 1 and 2 with random priorities, wait timeouts, hold times and
// idle phases, so that their shares grow, shrink and are asked back all
// the time. Each reports every local hold; merged, the holds never weigh
// more than the limit at any instant.
func TestSharesHoldThePoolLimitAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, addr := startServer(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var workers []*worker
	for i := range 3 {
		workers = append(workers, startWorker(t, ctx, "load", addr, strconv.FormatUint(seed+uint64(i), 10), "2s"))
	}
	var holds []hold
	perWorker := make([]int, len(workers))
	for i, w := range workers {
		for line := range w.lines {
			var h hold
			if _, err := fmt.Sscan(line, &h.start, &h.end, &h.weight); err != nil {
				t.Fatalf("worker %d: %q: %v", i, line, err)
			}
			holds = append(holds, h)
			perWorker[i]++
		}
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v: %s", i, err, w.errb.String())
		}
	}
	peak := checkLimit(t, holds, limit)
	t.Logf("%d holds (%v per worker), at most %d permits held at once", len(holds), perWorker, peak)
	for i, n := range perWorker {
		if n < 20 {
			t.Fatalf("worker %d reported %d holds: too few to say anything", i, n)
		}
	}
	if peak < limit-1 {
		t.Fatalf("at most %d permits were held at once: the shares never filled the pool", peak)
	}
	if s, _ := srv.Engine().GetPool(pool); s.Status.Held != 0 {
		t.Fatalf("the workers closed their semaphores but %d permits are held", s.Status.Held)
	}
}

// checkLimit sweeps the holds in time order and fails if their weight
// exceeds max at any instant; it returns the highest weight held.
func checkLimit(t *testing.T, holds []hold, max int64) int64 {
	type edge struct {
		at int64
		d  int64
	}
	var edges []edge
	for _, h := range holds {
		edges = append(edges, edge{h.start, h.weight}, edge{h.end, -h.weight})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].d < edges[j].d // an end before a start at the same instant
	})
	var cur, peak int64
	for _, e := range edges {
		cur += e.d
		if cur > max {
			t.Fatalf("%d permits held at %s, over the pool's limit of %d", cur, time.Unix(0, e.at).Format(time.RFC3339Nano), max)
		}
		peak = maxOf(peak, cur)
	}
	return peak
}

func maxOf(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// TestWaiterInAnotherProcessServedWhenDemandDrops: a holder process uses
// the whole pool through its share; an ordinary acquire in another process
// waits. When the holder's tasks end, the waiter is granted well within
// one renew interval of the share's lease (the server asked the holder to
// give back while the acquire waited; the holder gives back as its tasks
// end, without waiting for a renew).
func TestWaiterInAnotherProcessServedWhenDemandDrops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, addr := startServer(t)
	const ttl = 3 * time.Second // renew interval 1s
	holder := startWorker(t, ctx, "hold", addr, ttl.String())
	if l := holder.next(t); l != "holding" {
		t.Fatalf("holder: %q", l)
	}
	if s, _ := srv.Engine().GetPool(pool); s.Status.Held != limit {
		t.Fatalf("the holder's share holds %d, want the whole pool (%d)", s.Status.Held, limit)
	}
	waiter := startWorker(t, ctx, "wait", addr)
	if l := waiter.next(t); l != "connected" {
		t.Fatalf("waiter: %q", l)
	}
	// The engine knows when the acquire waits; then the holder's tasks end.
	testwait.For(t, "the waiter's acquire to wait", func() bool { s, _ := srv.Engine().GetPool(pool); return s.Status.Waiting > 0 })
	if _, err := fmt.Fprintln(holder.stdin, "end"); err != nil {
		t.Fatal(err)
	}
	ended, err := strconv.ParseInt(strings.TrimPrefix(holder.next(t), "ended "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	granted, err := strconv.ParseInt(strings.TrimPrefix(waiter.next(t), "granted "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(granted - ended); d > ttl/3 {
		t.Fatalf("the waiter was granted %v after the holder's tasks ended, more than one renew interval (%v)", d, ttl/3)
	} else {
		t.Logf("granted %v after the holder's tasks ended", d)
	}
}

// runWorker runs a worker process in mode with args.
func runWorker(mode string, args []string) error {
	c, err := client.Dial(args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	switch mode {
	case "load":
		seed, _ := strconv.ParseUint(args[1], 10, 64)
		d, _ := time.ParseDuration(args[2])
		return loadWorker(ctx, c, seed, d)
	case "hold":
		ttl, _ := time.ParseDuration(args[1])
		sem, err := c.NewSemaphore(pool, client.WithLocalShare(limit), client.WithShareLeaseOptions(client.WithTTL(ttl)))
		if err != nil {
			return err
		}
		defer sem.Close()
		if err := sem.Acquire(ctx, limit); err != nil { // limit tasks of 1 would do the same
			return err
		}
		fmt.Println("holding")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		fmt.Println("ended", time.Now().UnixNano())
		sem.Release(limit)
		time.Sleep(ttl) // keep the process (and its share) alive meanwhile
		return nil
	case "wait":
		fmt.Println("connected")
		l, err := c.Acquire(ctx, pool)
		if err != nil {
			return err
		}
		fmt.Println("granted", time.Now().UnixNano())
		return l.Release(ctx)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// loadWorker runs 8 goroutines of random tasks through a semaphore for d,
// then prints every hold: "start end weight" in wall-clock nanoseconds.
func loadWorker(ctx context.Context, c *client.Client, seed uint64, d time.Duration) error {
	rng := rand.New(rand.NewPCG(seed, 1))
	sem, err := c.NewSemaphore(pool, client.WithLocalShare(3+rng.Int64N(limit-2)), client.WithShareLeaseOptions(client.WithTTL(900*time.Millisecond)))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var holds []hold
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range 8 {
		r := rand.New(rand.NewPCG(seed, uint64(g)+2))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if r.IntN(5) == 0 { // idle: the share's demand drops
					time.Sleep(time.Duration(r.IntN(80)) * time.Millisecond)
				}
				w := 1 + r.Int64N(2)
				opts := []client.AcquireOption{client.WithPriority(int32(r.IntN(3)))}
				if r.IntN(3) == 0 {
					opts = append(opts, client.WithWaitTimeout(time.Duration(1+r.IntN(30))*time.Millisecond))
				}
				if err := sem.Acquire(ctx, w, opts...); err != nil {
					continue // a wait timeout
				}
				start := time.Now().UnixNano()
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				end := time.Now().UnixNano()
				mu.Lock()
				holds = append(holds, hold{start, end, w})
				mu.Unlock()
				sem.Release(w)
			}
		}()
	}
	wg.Wait()
	sem.Close()
	out := bufio.NewWriter(os.Stdout)
	for _, h := range holds {
		fmt.Fprintln(out, h.start, h.end, h.weight)
	}
	return out.Flush()
}
