package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/examples/spider/testsite"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// childEnv makes the test binary run as the crawler (see TestMain), so
// that the test can start crawlers as separate processes without building
// anything.
const childEnv = "TOLLGATE_SPIDER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "spider:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Three crawler processes crawl a site through one Tollgate server with a
// pool of 2. The site's own record shows that it never served more than 2
// requests at once, and that every page was fetched exactly once.
func TestThreeCrawlersShareOneLimit(t *testing.T) {
	const (
		processes = 3
		limit     = 2
		pages     = 40
		delay     = 30 * time.Millisecond // so that overlapping downloads would show
	)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	site := testsite.New(pages, delay)
	web := httptest.NewServer(site)
	defer web.Close()

	tg := server.New(server.Config{})
	if _, err := tg.Engine().CreatePool(limiter.PoolConfig{Name: "site", ConcurrencyLimit: limit}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := tg.GRPCServer()
	go func() { _ = gs.Serve(lis) }()
	defer func() {
		gs.Stop()
		tg.Close()
	}()

	stateDir := t.TempDir()
	type proc struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	procs := make([]*proc, processes)
	for i := range procs {
		p := &proc{cmd: exec.CommandContext(ctx, os.Args[0],
			"-tollgate", lis.Addr().String(), "-pool", "site",
			"-start", web.URL+"/", "-state-dir", stateDir, "-workers", "4")}
		p.cmd.Env = append(os.Environ(), childEnv+"=1")
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	fetched := 0
	summary := regexp.MustCompile(`fetched (\d+) pages, (\d+) failed`)
	for i, p := range procs {
		err := p.cmd.Wait()
		t.Logf("crawler %d: %s", i, bytes.TrimSpace(p.stdout.Bytes()))
		if err != nil {
			t.Fatalf("crawler %d: %v\nstderr:\n%s", i, err, p.stderr.String())
		}
		m := summary.FindSubmatch(p.stdout.Bytes())
		if m == nil || string(m[2]) != "0" {
			t.Fatalf("crawler %d printed %q\nstderr:\n%s", i, p.stdout.String(), p.stderr.String())
		}
		n, _ := strconv.Atoi(string(m[1]))
		fetched += n
	}

	st := site.Stats()
	t.Logf("the site served at most %d requests at once", st.MaxInFlight)
	if st.MaxInFlight > limit {
		t.Errorf("the site served %d requests at once; the pool's limit is %d", st.MaxInFlight, limit)
	}
	for _, path := range site.Paths() {
		if n := st.Fetches[path]; n != 1 {
			t.Errorf("%s was fetched %d times; want exactly once", path, n)
		}
	}
	if len(st.Fetches) != pages+1 {
		t.Errorf("the site saw requests for %d paths; want its %d pages only: %v", len(st.Fetches), pages+1, st.Fetches)
	}
	if fetched != pages+1 {
		t.Errorf("the crawlers report %d pages fetched; want %d", fetched, pages+1)
	}
	info, err := tg.Engine().GetPool("site")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Granted != pages+1 || info.Status.Held != 0 {
		t.Errorf("Tollgate granted %d leases and holds %d; want %d and 0", info.Status.Granted, info.Status.Held, pages+1)
	}
}
