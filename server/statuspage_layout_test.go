package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/citest"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// screenshotDir is where TestStatusPageLayout writes its screenshots:
// $TOLLGATE_SCREENSHOTS when set, else a directory the test logs.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("TOLLGATE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "tollgate-status-page-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The status page, in Chromium at 1280 and 1920 pixels wide, fits without
// sideways scrolling (no section scrolls, nor the page), draws each pool's
// chart of the last minutes, lists the waiters of the selected pool in
// grant order beside its leases, and shows a rate-only pool's rate in use.
// Its screenshots are written for people to look at.
func TestStatusPageLayout(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		citest.SkipOrFail(t, chromiumPath+" is not installed, so the status page is not tested in a browser here (apt-get install chromium; .ci/run installs it)")
	}
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "orders-db.primary.eu-west-1", Description: "primary orders database, writes only", ConcurrencyLimit: 64})
	e.createPool(&tollgatev1.Pool{Name: "api.payments-provider.example.com", Rate: 20, Burst: 40})
	e.createPool(&tollgatev1.Pool{Name: "queue-db", ConcurrencyLimit: 1, Rate: 1000, Burst: 1000})
	for i := range 6 {
		e.createPool(&tollgatev1.Pool{Name: fmt.Sprintf("tenant-%d.search-cluster", i), Description: "per-tenant search", ConcurrencyLimit: 1_000_000})
	}
	for i := range 40 {
		e.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db.primary.eu-west-1", ClientId: fmt.Sprintf("worker-%d", i)})
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "queue-db", ClientId: "holder"})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, w := range []struct {
		client   string
		priority int32
	}{{"waiter-a", 0}, {"waiter-b", 0}, {"waiter-urgent", 5}} {
		want := e.status("queue-db").GetWaiting() + 1
		go func() {
			_, _ = e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "queue-db", ClientId: w.client, Priority: w.priority})
		}()
		testwait.For(t, w.client+" waiting", func() bool { return e.status("queue-db").GetWaiting() == want })
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	browser, cancelTimeout := context.WithTimeout(browser, 2*time.Minute)
	defer cancelTimeout()
	dir := screenshotDir(t)

	for i, width := range []int64{1280, 1920} {
		err := chromedp.Do(browser,
			chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(o.http.URL+"/#pool=queue-db"),
			chromedp.WaitVisible(`#waiter-rows tr`))
		if err != nil {
			t.Fatalf("%d px: %v", width, err)
		}
		// Two polls at two times of the server's clock make a chart.
		o.clock.Advance(time.Second)
		for _, cond := range []string{
			`document.querySelectorAll("#pool-rows svg.spark path.area").length >= 9`,
			`document.querySelector("#pool-chart svg.spark path.area") !== null`,
		} {
			if _, err := chromedp.Run(browser, chromedp.Poll[bool](cond)); err != nil {
				t.Fatalf("%d px: waiting for %s: %v", width, cond, err)
			}
		}
		overflow := evaluate[[]string](t, browser, `[...document.querySelectorAll("section, html")].filter(s => s.scrollWidth > s.clientWidth + 1).map(s => (s.id || s.tagName) + " " + s.scrollWidth + ">" + s.clientWidth)`)
		waiters := evaluate[string](t, browser, `[...document.querySelectorAll("#waiter-rows tr")].map(r => r.cells[0].textContent + ":" + r.cells[1].textContent).join(" ")`)
		chartPaths := evaluate[string](t, browser, `[...document.querySelectorAll("#pool-chart text")].map(t => t.textContent).join(" ")`)
		shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%d px: screenshot: %v", width, err)
		}
		if len(overflow) > 0 {
			t.Errorf("at %d px the page scrolls sideways: %v; the pool table's columns: %s", width, overflow,
				evaluate[string](t, browser, `[...document.querySelectorAll("#pools th")].map(th => th.textContent + "=" + th.offsetWidth).join(", ")`))
		}
		if want := "1:waiter-urgent 2:waiter-a 3:waiter-b"; waiters != want {
			t.Errorf("at %d px the waiters are %q, want %q (grant order)", width, waiters, want)
		}
		for _, want := range []string{"held", "limit in force", "waiting", "5 min ago", "now"} {
			if !strings.Contains(chartPaths, want) {
				t.Errorf("at %d px the pool's chart lacks %q: %q", width, want, chartPaths)
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("status-page-%d.png", width))
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot at %d px: %s", width, path)
		if i > 0 {
			continue
		}
		// The rate-only pool's bar shows the rate in use: 10 tokens
		// granted over one second of the server's clock.
		o.clock.Advance(time.Second)
		if _, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api.payments-provider.example.com", Tokens: i64(10)}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(browser, chromedp.Poll[bool](
			`document.querySelector('tr[data-pool="api.payments-provider.example.com"] td.util').textContent.includes("10 / 20 per s")`)); err != nil {
			t.Fatalf("the rate-only pool's bar does not show 10 / 20 per s: %v", err)
		}
	}
}

// evaluate runs expr in the page and returns its value.
func evaluate[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}
