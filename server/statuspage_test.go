package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/citest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// chromiumPath is where Debian's chromium package puts the browser; .ci/run
// installs it.
const chromiumPath = "/usr/bin/chromium"

// The status page, loaded in headless Chromium, shows a pool created
// through the gRPC API with its numbers, its suspension and revocations,
// once its JavaScript has run.
func TestStatusPageInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		citest.SkipOrFail(t, chromiumPath+" is not installed, so the status page is not tested in a browser here (apt-get install chromium; .ci/run installs it)")
	}
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "orders-db", Description: "primary orders database", ConcurrencyLimit: 5})
	e.createPool(&tollgatev1.Pool{Name: "api.example.com", Rate: 20, Burst: 40})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db", Weight: i64(2), ClientId: "worker-1"})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db", ClientId: "worker-2"})
	stuck := e.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db", ClientId: "worker-3"})
	if _, err := e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "orders-db", LeaseId: stuck.GetId(), Reason: "stuck"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{Name: "orders-db"}); err != nil {
		t.Fatal(err)
	}
	e.createPool(&tollgatev1.Pool{Name: "replicas", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE})
	if _, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "replicas", Resources: wireRes("r1", "r2", "r3", "r4")}); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "replicas", ClientId: "reader"})
	// An active pool with no instance free, and a rate-only pool with
	// some of its burst spent.
	e.createPool(&tollgatev1.Pool{Name: "busy", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE})
	if _, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "busy", Resources: wireRes("b1")}); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "busy", ClientId: "hog"})
	if _, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api.example.com", Tokens: i64(30)}); err != nil {
		t.Fatal(err)
	}

	// With #pool=orders-db (what clicking the pool sets), the page lists
	// orders-db's leases.
	dom := dumpDOM(t, o.http.URL+"/#pool=orders-db")
	if text := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(dom, " "); regexp.MustCompile(`NaN|undefined`).MatchString(text) {
		t.Errorf("the page's text shows NaN or undefined:\n%s", text)
	}
	for _, want := range []string{
		`data-pool="orders-db"`,
		`data-pool="api.example.com"`,
		"primary orders database",
		"3 / 5", // held / limit of orders-db
		"pool created",
		"serving",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page does not show %q after its script ran; DOM:\n%s", want, dom)
		}
	}
	// orders-db is suspended, and has revoked one lease; api.example.com
	// is neither.
	for _, c := range []struct{ what, re string }{
		{"orders-db's suspended badge", `data-pool="orders-db"[^>]*><td class="name"[^>]*>orders-db <span class="badge suspended"[^>]*>suspended</span>`},
		{"orders-db's revoked count of 1", `data-pool="orders-db"[^>]*>.*?<td class="num revoked">1</td>`},
		{"api.example.com's revoked count of 0", `data-pool="api.example.com"[^>]*>.*?<td class="num revoked">0</td>`},
		{"the lease revoked event naming its operator", `lease revoked</span>.*?by 127\.0\.0\.1`},
		{"replicas' instances", `data-pool="replicas"[^>]*><td class="name"[^>]*>replicas<span class="desc resources"[^>]*>active: 3 of 4 instances free</span>`},
		{"replicas' utilisation of 1 of its 4 instances", `data-pool="replicas"[^>]*>.*?width: 25%`},
		{"orders-db's wait p99 of 0 (every grant at once)", `data-pool="orders-db"[^>]*>.*?<td class="num wait"[^>]*>0</td>`},
		{"busy's instances, none free", `data-pool="busy"[^>]*><td class="name"[^>]*>busy<span class="desc resources"[^>]*>active: 0 of 1 instances free</span>`},
		{"api.example.com's rate bar, none of its rate in use (the server's clock stands still), and 10 of its 40 tokens left", `data-pool="api.example.com".*?width: 0%.*?>0 / 20 per s<.*?<td class="num rate">20<span class="sub tokens"[^>]*>10 / 40</span>`},
		{"the leases of orders-db", `Leases of <span id="leases-pool">orders-db</span>`},
		{"worker-1's lease of weight 2", `<tr data-lease="1"><td class="num">1</td><td>worker-1</td><td class="num">2</td>`},
		{"worker-2's lease", `<tr data-lease="2"><td class="num">2</td><td>worker-2</td>`},
		{"api.example.com's wait p99 with no grants", `data-pool="api.example.com"[^>]*>.*?<td class="num wait"[^>]*>—</td>`},
	} {
		if !regexp.MustCompile(c.re).MatchString(dom) {
			t.Errorf("the page does not show %s; DOM:\n%s", c.what, dom)
		}
	}
	if regexp.MustCompile(`data-pool="api.example.com"[^>]*><td class="name"[^>]*>api.example.com <span class="badge suspended"`).MatchString(dom) {
		t.Errorf("api.example.com is shown suspended; DOM:\n%s", dom)
	}
	// The utilisation bar of orders-db is 60% full.
	if !regexp.MustCompile(`data-pool="orders-db".*?width: 60%`).MatchString(dom) {
		t.Errorf("orders-db's utilisation bar is not at 60%%; DOM:\n%s", dom)
	}
}

// dumpDOM loads url in headless Chromium, lets its scripts run for up to 5
// seconds of virtual time, and returns the resulting DOM.
func dumpDOM(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=5000", "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", url, err, stderr.String())
	}
	return string(out)
}

// TestStatusPagePagesPools: with more pools than a page of /api/pools
// holds, the status page shows the first page, says which pools it shows
// of how many, and offers the next page.
func TestStatusPagePagesPools(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		citest.SkipOrFail(t, chromiumPath+" is not installed, so the status page is not tested in a browser here (apt-get install chromium; .ci/run installs it)")
	}
	o := startOps(t, Config{}, nil)
	e := o.env()
	for i := range 502 {
		e.createPool(&tollgatev1.Pool{Name: fmt.Sprintf("p%03d", i), ConcurrencyLimit: 1})
	}
	dom := dumpDOM(t, o.http.URL+"/")
	for _, want := range []string{`data-pool="p499"`, "Pools 1–500 of 502.", `id="pools-next"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page does not show %q; DOM:\n%s", want, dom)
		}
	}
	if strings.Contains(dom, `data-pool="p500"`) || strings.Contains(dom, `id="pools-prev"`) {
		t.Errorf("the first page shows a pool past 500, or a previous page; DOM:\n%s", dom)
	}
}
