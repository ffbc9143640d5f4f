package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/client"
)

// maxPageSize bounds the bytes read of one page.
const maxPageSize = 4 << 20

// idlePoll is how often a crawler with nothing to fetch looks for URLs
// found by the other processes.
const idlePoll = 10 * time.Millisecond

// crawler downloads the pages of one site, taking each download's lease
// from a Tollgate pool so that the limit holds across every crawler
// process, and sharing the URLs to fetch with the others through a
// frontier directory.
type crawler struct {
	tg       *client.Client
	pool     string
	frontier *frontier
	site     *url.URL // only URLs of this scheme and host are followed
	out      string   // where to save pages; "" to not save them
	ttl      time.Duration
	http     *http.Client
	log      *slog.Logger

	fetched atomic.Int64
	failed  atomic.Int64
}

// crawl crawls from start until every URL found by any process has been
// fetched, running at most workers downloads of this process at once
// (and at most the pool's limit across all processes).
func (cr *crawler) crawl(ctx context.Context, start string, workers int, progress func(client.Progress)) error {
	if _, err := cr.frontier.add(start); err != nil {
		return err
	}
	opts := []client.GroupOption{
		client.WithMaxInFlight(workers),
		client.WithAcquireOptions(client.WithTTL(cr.ttl)),
		// A page that fails is logged and the crawl goes on.
		client.WithErrorPolicy(client.HandleErrors(func(err error) {
			cr.failed.Add(1)
			cr.log.Warn("fetch failed", "err", err)
		})),
	}
	if progress != nil {
		opts = append(opts, client.WithProgress(progress))
	}
	g, err := cr.tg.NewGroup(ctx, cr.pool, opts...)
	if err != nil {
		return err
	}
	err = cr.feed(ctx, g)
	if werr := g.Wait(); err == nil {
		err = werr
	}
	return err
}

// feed gives the group every URL this process claims, until the crawl is
// complete or ctx ends.
func (cr *crawler) feed(ctx context.Context, g *client.Group) error {
	tick := time.NewTicker(idlePoll)
	defer tick.Stop()
	for {
		u, err := cr.frontier.claim()
		if err != nil {
			return err
		}
		if u != "" {
			// Go blocks while this process has `workers` downloads in
			// flight, so the process claims no more than it can start.
			g.Go(func(ctx context.Context) error { return cr.fetch(ctx, u) }, client.WithDescription(u))
			continue
		}
		if done, err := cr.frontier.complete(); err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// fetch downloads u under the lease the group holds for it, saves it,
// adds the links it finds to the frontier, and marks u done.
func (cr *crawler) fetch(ctx context.Context, u string) (err error) {
	defer func() {
		result := "ok"
		if err != nil {
			result = err.Error()
		}
		if derr := cr.frontier.done(u, result); err == nil {
			err = derr
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := cr.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPageSize))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	cr.fetched.Add(1)
	cr.log.Debug("fetched", "url", u, "bytes", len(body), "fencing_token", client.LeaseFromContext(ctx).FencingToken())
	if err := cr.save(u, body); err != nil {
		return err
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		return nil
	}
	for _, link := range cr.links(resp.Request.URL, body) {
		if _, err := cr.frontier.add(link); err != nil {
			return err
		}
	}
	return nil
}

// hrefs finds the targets of links in HTML; good enough for a crawler of
// well-formed pages, not an HTML parser.
var hrefs = regexp.MustCompile(`(?i)<a\s[^>]*?href\s*=\s*["']([^"']*)["']`)

// links returns the URLs of the site that page (at base) links to,
// resolved and without fragments.
func (cr *crawler) links(base *url.URL, page []byte) []string {
	var out []string
	for _, m := range hrefs.FindAllSubmatch(page, -1) {
		ref, err := url.Parse(string(m[1]))
		if err != nil {
			continue
		}
		u := base.ResolveReference(ref)
		u.Fragment, u.RawFragment = "", ""
		if u.Scheme != cr.site.Scheme || u.Host != cr.site.Host {
			continue
		}
		out = append(out, u.String())
	}
	return out
}

// save writes the page of u under the output directory, as
// <out>/<host>/<path> (index.html for a path ending in /).
func (cr *crawler) save(u string, body []byte) error {
	if cr.out == "" {
		return nil
	}
	pu, err := url.Parse(u)
	if err != nil {
		return err
	}
	p := pu.EscapedPath()
	if p == "" || strings.HasSuffix(p, "/") {
		p += "index.html"
	}
	name := filepath.Join(cr.out, pu.Host, filepath.FromSlash(filepath.Clean("/"+p)))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, body, 0o644)
}
