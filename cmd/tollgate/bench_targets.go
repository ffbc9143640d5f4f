package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/client"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// startTimeout bounds the wait for a benched server to answer.
const startTimeout = 30 * time.Second

// benchTollgate is the Tollgate server under test and the client of it.
type benchTollgate struct {
	proc   *benchProc // nil for --server
	c      *client.Client
	pool   string
	pools  []string // the pools the pairs are spread over: pool, or pool-0 to pool-(N-1) for --pools N
	lim    tollgatev1.LimiterServiceClient
	health healthpb.HealthClient
}

// startBenchTollgate starts `tollgate serve` (or uses --server), connects
// and creates the pool the pairs use: one that never makes them wait.
func startBenchTollgate(ctx context.Context, o benchOptions, pools int) (*benchTollgate, error) {
	tg := &benchTollgate{pool: fmt.Sprintf("tollgate-bench-%d", os.Getpid())}
	tg.pools = []string{tg.pool}
	if pools > 1 {
		tg.pools = make([]string, pools)
		for i := range tg.pools {
			tg.pools[i] = fmt.Sprintf("%s-%d", tg.pool, i)
		}
	}
	addr := o.server
	if addr == "" {
		bin := o.bin
		if bin == "" {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("finding this executable to start the server from: %w", err)
			}
			bin = exe
		}
		var err error
		if addr, err = freeLoopbackPort(); err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "tollgate-bench-")
		if err != nil {
			return nil, err
		}
		// One client at full speed: no per-client rate or lease limit, and
		// as many pools as it asks for.
		tg.proc, err = startBenchProc(bin, []string{"serve", "--listen", addr, "--http", "", "--data-dir", dir,
			"--client-rate", "-1", "--max-client-leases", "-1", "--max-pools", "-1", "--log-level", "warn"}, dir)
		if err != nil {
			return nil, err
		}
	}
	c, err := client.Dialer{ClientID: "tollgate-bench"}.Dial(addr)
	if err != nil {
		tg.close()
		return nil, err
	}
	tg.c = c
	tg.lim = tollgatev1.NewLimiterServiceClient(c.Conn())
	tg.health = healthpb.NewHealthClient(c.Conn())
	if err := tg.setUp(ctx); err != nil {
		tg.close()
		return nil, err
	}
	return tg, nil
}

// setUp waits for the server to serve and creates the pools, several at
// a time.
func (tg *benchTollgate) setUp(ctx context.Context) error {
	hctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		_, err := tg.health.Check(hctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			break
		}
		if tg.proc != nil && tg.proc.exited() {
			return fmt.Errorf("the server exited before serving: %s", tg.proc.output())
		}
		if hctx.Err() != nil {
			return fmt.Errorf("the server did not answer within %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	adm := tollgatev1.NewAdminServiceClient(tg.c.Conn())
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchCreators)
	for range min(benchCreators, len(tg.pools)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(tg.pools)); i = next.Add(1) - 1 {
				_, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: tg.pools[i], ConcurrencyLimit: 1_000_000}})
				if err != nil {
					errs <- fmt.Errorf("creating pool %s: %w", tg.pools[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// benchCreators is how many pools the bench creates at once.
const benchCreators = 32

// cases returns the Tollgate cases: the Go client's stream, unary calls,
// and two no-op calls.
func (tg *benchTollgate) cases() []benchCase {
	var pids []int
	if tg.proc != nil {
		pids = []int{tg.proc.cmd.Process.Pid}
	}
	return []benchCase{
		{name: caseStream, pids: pids, pair: func(ctx context.Context, _ int) error {
			l, err := tg.c.Acquire(ctx, tg.pool)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{name: caseStreamAsync, pids: pids, pair: func(ctx context.Context, _ int) error {
			l, err := tg.c.Acquire(ctx, tg.pool)
			if err != nil {
				return err
			}
			return l.ReleaseAsync()
		}},
		{name: caseUnary, pids: pids, pair: func(ctx context.Context, _ int) error {
			resp, err := tg.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: tg.pool})
			if err != nil {
				return err
			}
			_, err = tg.lim.Release(ctx, &tollgatev1.ReleaseRequest{Pool: tg.pool, LeaseId: resp.GetLease().GetId()})
			return err
		}},
		{name: caseNoop, pids: pids, pair: func(ctx context.Context, _ int) error {
			for range 2 {
				if _, err := tg.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

// close deletes the pools of a --server, and stops a started server.
func (tg *benchTollgate) close() {
	if tg.c != nil {
		if tg.proc == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for _, name := range tg.pools {
				_, _ = tollgatev1.NewAdminServiceClient(tg.c.Conn()).DeletePool(ctx, &tollgatev1.DeletePoolRequest{Name: name, Force: true})
			}
			cancel()
		}
		_ = tg.c.Close()
	}
	if tg.proc != nil {
		tg.proc.stop()
	}
}

// benchRedis is a redis-server started for the bench, and a client of it.
type benchRedis struct {
	proc   *benchProc
	rdb    *redis.Client
	seq    []uint64 // per caller: the number of its next member
	key    string
	script *redis.Script
}

// redisAcquire is the semaphore's acquire: drop members older than the TTL
// (expired holders), and add this one if fewer than the limit remain.
// KEYS[1] the set; ARGV: now (ms), TTL (ms), limit, member. Returns 1 if
// acquired.
const redisAcquire = `
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  return 1
end
return 0`

// startBenchRedis starts redis-server on a free loopback port, without
// persistence, and connects to it with a connection per caller.
func startBenchRedis(ctx context.Context, callers int) (*benchRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("--peer redis needs redis-server, which is not on PATH; install it (Debian or Ubuntu: apt-get install redis-server; bench/peer-redis does it when run as root)")
	}
	addr, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	dir, err := os.MkdirTemp("", "tollgate-bench-redis-")
	if err != nil {
		return nil, err
	}
	p, err := startBenchProc(bin, []string{"--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning"}, dir)
	if err != nil {
		return nil, err
	}
	rd := &benchRedis{proc: p, seq: make([]uint64, callers), key: "tollgate-bench", script: redis.NewScript(redisAcquire),
		rdb: redis.NewClient(&redis.Options{Addr: addr, PoolSize: callers, MinIdleConns: callers})}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		err := rd.rdb.Ping(ctx).Err()
		if err == nil {
			return rd, nil
		}
		if p.exited() || ctx.Err() != nil {
			rd.close()
			return nil, fmt.Errorf("redis-server did not answer on %s: %v %s", addr, err, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (rd *benchRedis) benchCase() benchCase {
	return benchCase{name: caseRedis, pids: []int{rd.proc.cmd.Process.Pid}, pair: func(ctx context.Context, caller int) error {
		rd.seq[caller]++
		member := strconv.Itoa(caller) + "-" + strconv.FormatUint(rd.seq[caller], 10)
		ok, err := rd.script.Run(ctx, rd.rdb, []string{rd.key}, time.Now().UnixMilli(), 60_000, 1_000_000, member).Int()
		if err != nil {
			return err
		}
		if ok != 1 {
			return errors.New("the Redis semaphore refused a permit")
		}
		return rd.rdb.ZRem(ctx, rd.key, member).Err()
	}}
}

func (rd *benchRedis) close() {
	_ = rd.rdb.Close()
	rd.proc.stop()
}

// benchProc is a child process: a server under test.
type benchProc struct {
	cmd  *exec.Cmd
	out  *os.File // its output, kept to explain a failure
	dir  string   // removed at stop
	done chan struct{}
}

// startBenchProc starts bin with args, its output going to a temporary
// file in dir, shown if it fails to start serving.
func startBenchProc(bin string, args []string, dir string) (*benchProc, error) {
	out, err := os.CreateTemp(dir, "output-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &benchProc{cmd: cmd, out: out, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *benchProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *benchProc) output() string {
	b, _ := os.ReadFile(p.out.Name())
	return string(b)
}

// stop ends the process (SIGINT, then SIGKILL after 5 s) and removes its
// directory.
func (p *benchProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.out.Close()
	os.RemoveAll(p.dir)
}

// freeLoopbackPort returns a 127.0.0.1 address whose port was free a
// moment ago.
func freeLoopbackPort() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}
