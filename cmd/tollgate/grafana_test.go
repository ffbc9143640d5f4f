package main

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/hatest"
)

// dashboardFile is the Grafana dashboard that deploy/README.md offers.
const dashboardFile = "../../deploy/grafana/tollgate.json"

// Every query of the Grafana dashboard names metrics a server exports,
// with labels those metrics have: a renamed metric or label fails here,
// not on an operator's blank panel. The server is one of a cluster, so
// that the leadership metrics are exported too, and it has served an
// acquire, a release and a take, so that every family has a series.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	etcd := etcdtest.Start(t)
	addr := hatest.FreeAddr(t)
	_, httpAddr := startServe(t, "--listen", addr, "--advertise", addr, "--etcd", etcd.Endpoint(), "--etcd-session-ttl", "2s")
	runCLI(t, addr, "pool", "create", "db", "--concurrency", "2", "--rate", "100", "--burst", "10").mustSucceed(t)
	runCLI(t, addr, "run", "db", "--", "true").mustSucceed(t)
	runCLI(t, addr, "take", "db").mustSucceed(t)

	families := scrapeFamilies(t, "http://"+httpAddr+"/metrics")
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	queries := 0
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			checkQuery(t, "variable "+v.Name, v.Definition, families)
			queries++
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkQuery(t, "panel "+p.Title, tg.Expr, families)
			queries++
		}
	}
	if queries < 20 {
		t.Fatalf("read %d queries from %s; the dashboard has more", queries, dashboardFile)
	}
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// scrapeFamilies reads url's Prometheus text exposition.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return families
}

var (
	// A PromQL selector: a metric name and, maybe, its label matchers.
	selectorRe = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?`)
	// The label names of a selector's matchers.
	matcherRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	// A grouping: by (a, b) or without (a).
	groupingRe = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// The words of a query that are not metric names.
var promqlWords = map[string]bool{
	"sum": true, "rate": true, "increase": true, "histogram_quantile": true, "by": true,
	"without": true, "label_values": true, "max": true, "min": true, "avg": true,
}

// Labels every series has once Prometheus scrapes it.
var targetLabels = map[string]bool{"instance": true, "job": true}

// checkQuery fails t when query names a metric families lacks, or a label
// that none of the query's metrics has.
func checkQuery(t *testing.T, where, query string, families map[string]*dto.MetricFamily) {
	t.Helper()
	labels := map[string]bool{}
	metrics := 0
	for _, m := range selectorRe.FindAllStringSubmatch(groupingRe.ReplaceAllString(stripStrings(query), ""), -1) {
		name := m[1]
		if promqlWords[name] || !strings.Contains(name, "_") || strings.HasPrefix(name, "__") {
			continue
		}
		f := exportedFamily(name, families)
		if f == nil {
			t.Errorf("%s: %q is not exported by the server (query %s)", where, name, query)
			continue
		}
		metrics++
		for _, l := range familyLabels(f) {
			labels[l] = true
		}
		if f.GetType() == dto.MetricType_HISTOGRAM && strings.HasSuffix(name, "_bucket") {
			labels["le"] = true
		}
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			if l := mm[1]; !targetLabels[l] && !hasLabel(f, l) {
				t.Errorf("%s: %s has no label %q (query %s)", where, name, l, query)
			}
		}
	}
	if metrics == 0 {
		t.Errorf("%s: query names no metric: %s", where, query)
	}
	for _, g := range groupingRe.FindAllStringSubmatch(query, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] && !targetLabels[l] {
				t.Errorf("%s: groups by %q, which none of its metrics has (query %s)", where, l, query)
			}
		}
	}
}

// stripStrings blanks the contents of a query's quoted strings, so that
// a matcher's value ("$pool") is not read as a name.
func stripStrings(q string) string {
	return regexp.MustCompile(`"[^"]*"`).ReplaceAllString(q, `""`)
}

// exportedFamily is the family that name, a series name, belongs to.
func exportedFamily(name string, families map[string]*dto.MetricFamily) *dto.MetricFamily {
	if f := families[name]; f != nil {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f := families[base]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
				return f
			}
		}
	}
	return nil
}

func familyLabels(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

func hasLabel(f *dto.MetricFamily, label string) bool {
	for _, l := range familyLabels(f) {
		if l == label {
			return true
		}
	}
	return false
}
