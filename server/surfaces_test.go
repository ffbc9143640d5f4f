package server

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/session"
)

// surfaceRow matches a row of the table of surfaces in docs/operations.md
// and captures its first cell's code span.
var surfaceRow = regexp.MustCompile("^\\| `([^`]+)` \\|(.*)\\|$")

// documentedSurfaces parses the table under "### Every surface and its
// bounds" and returns its rows by surface, each with its cells.
func documentedSurfaces(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n### Every surface and its bounds\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Every surface and its bounds" section`)
	}
	rows := map[string][]string{}
	for line := range strings.Lines(after) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			break
		}
		if m := surfaceRow.FindStringSubmatch(line); m != nil {
			rows[m[1]] = strings.Split(m[2], "|")
		}
	}
	return rows
}

// TestEverySurfaceHasItsBounds: every listener, every gRPC method the
// server registers (health, reflection and Envoy's included), every kind
// of Session request and every HTTP route has a row in docs/operations.md
// that says its bound per caller, its bound in all, what one call may
// cost under a pool's lock and the test that floods it. A surface added
// without its bounds fails here.
func TestEverySurfaceHasItsBounds(t *testing.T) {
	rows := documentedSurfaces(t)
	var want []string

	// Listeners: every connection limiter of the server.
	names := map[string]string{"grpcConns": "listener gRPC", "httpConns": "listener HTTP"}
	ot := reflect.TypeFor[ops]()
	for i := range ot.NumField() {
		f := ot.Field(i)
		if f.Type == reflect.TypeFor[*limits.ConnLimiter]() {
			name, ok := names[f.Name]
			if !ok {
				t.Errorf("connection limiter %s has no name in this test: give it one, and a row", f.Name)
			}
			want = append(want, name)
		}
	}

	srv := New(Config{Logger: discardLogger(), EnvoyRLS: true})
	defer srv.closeEngine()
	gs := srv.GRPCServer()
	for svc, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			want = append(want, "/"+svc+"/"+m.Name)
		}
	}
	for _, k := range session.KindNames {
		want = append(want, "Session "+k)
	}
	want = append(want, httpapi.Routes(srv.httpOptions())...)
	slices.Sort(want)
	for _, s := range want {
		cells, ok := rows[s]
		if !ok {
			t.Errorf("no row for `%s` in docs/operations.md's table of surfaces", s)
			continue
		}
		if len(cells) != 4 {
			t.Errorf("row `%s` has %d cells after the surface; want 4 (per caller, in all, under a pool's lock, flood test)", s, len(cells))
			continue
		}
		for i, c := range cells {
			if strings.TrimSpace(c) == "" {
				t.Errorf("row `%s`: cell %d is empty", s, i+2)
			}
		}
	}
	for s := range rows {
		if !slices.Contains(want, s) {
			t.Errorf("row `%s` names no surface of the server", s)
		}
	}
}
