// Command spider is a web crawler whose downloads are limited globally by
// Tollgate: run it as several processes (on one host) and together they
// download a site once, never with more requests at once than the pool's
// concurrency limit.
//
// Each process runs its downloads as tasks of a client.Group: every
// download holds a lease of the pool while it runs, so the site sees at
// most the pool's limit of requests at once, however many processes and
// workers there are. The processes share the URLs to fetch through a state
// directory (see frontier.claim): a URL is claimed by creating a file named by
// its hash with O_CREATE|O_EXCL, so each page is fetched exactly once.
//
// Try it against the site it can serve itself:
//
//	go build -o tollgate ./cmd/tollgate && ./tollgate serve &
//	./tollgate pool create site --concurrency 2
//	go run ./examples/spider -serve-site 127.0.0.1:8080 -pages 100 &
//	go build -o spider ./examples/spider
//	for i in 1 2 3; do ./spider -state-dir /tmp/crawl -start http://127.0.0.1:8080/ & done; wait
//	curl -s 127.0.0.1:8080/_stats     # max_in_flight is at most 2; each page fetched once
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/examples/spider/testsite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "spider:", err)
		os.Exit(1)
	}
}

// run runs the command with args (without the program name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("spider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tollgate = fs.String("tollgate", client.ServerFromEnv(), "Tollgate server address (or a comma-separated list); default $TOLLGATE_SERVER or "+client.DefaultServer)
		pool     = fs.String("pool", "site", "Tollgate pool whose concurrency limit bounds the downloads of every crawler")
		start    = fs.String("start", "", "URL to start from; only URLs of its host are crawled")
		stateDir = fs.String("state-dir", "", "directory shared by the crawler processes (on one host)")
		out      = fs.String("out", "", "directory to save the pages in (default: do not save)")
		workers  = fs.Int("workers", 4, "most downloads in flight in this process (waiting for a lease or running)")
		ttl      = fs.Duration("ttl", 10*time.Second, "lease TTL of a download")
		progress = fs.Bool("progress", false, "print progress to stderr")
		verbose  = fs.Bool("v", false, "log every download")
		serve    = fs.String("serve-site", "", "instead of crawling, serve a generated test site on this address (host:port) and print its statistics on exit")
		pages    = fs.Int("pages", 50, "with -serve-site: number of pages")
		delay    = fs.Duration("delay", 30*time.Millisecond, "with -serve-site: time to serve each page")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serve != "" {
		return serveSite(ctx, *serve, *pages, *delay, stdout, stderr)
	}
	if *start == "" || *stateDir == "" {
		return errors.New("-start and -state-dir are required (or -serve-site)")
	}
	site, err := url.Parse(*start)
	if err != nil || (site.Scheme != "http" && site.Scheme != "https") || site.Host == "" {
		return fmt.Errorf("-start %q is not an http(s) URL", *start)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("pid", os.Getpid())

	fr, err := openFrontier(*stateDir)
	if err != nil {
		return err
	}
	tg, err := client.Dialer{Logger: log, ClientID: fmt.Sprintf("spider-%d", os.Getpid())}.Dial(*tollgate)
	if err != nil {
		return err
	}
	defer tg.Close()
	cr := &crawler{
		tg:       tg,
		pool:     *pool,
		frontier: fr,
		site:     site,
		out:      *out,
		ttl:      *ttl,
		http:     &http.Client{},
		log:      log,
	}
	var report func(client.Progress)
	if *progress {
		report = func(p client.Progress) {
			fmt.Fprintf(stderr, "\rspider %d: %d fetched, %d failed, %d downloading, %d waiting for a lease, %d queued   ",
				os.Getpid(), p.Done, p.Failed, p.Running, p.Waiting, p.Queued)
		}
	}
	err = cr.crawl(ctx, site.String(), *workers, report)
	if *progress {
		fmt.Fprintln(stderr)
	}
	fmt.Fprintf(stdout, "spider %d: fetched %d pages, %d failed\n", os.Getpid(), cr.fetched.Load(), cr.failed.Load())
	return err
}

// serveSite serves a generated test site until ctx ends, then prints what
// it recorded.
func serveSite(ctx context.Context, addr string, pages int, delay time.Duration, stdout, stderr io.Writer) error {
	site := testsite.New(pages, delay)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: site, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "spider: serving a test site of %d pages on http://%s/ (statistics at %s); Ctrl-C to stop\n", pages, lis.Addr(), testsite.StatsPath)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	st := site.Stats()
	fetchedTwice := 0
	for _, n := range st.Fetches {
		if n > 1 {
			fetchedTwice++
		}
	}
	fmt.Fprintf(stdout, "most requests at once: %d; paths fetched: %d; fetched more than once: %d\n", st.MaxInFlight, len(st.Fetches), fetchedTwice)
	return nil
}
