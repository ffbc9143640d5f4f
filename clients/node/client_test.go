// Package node holds the test of the Node.js client package: it packs the
// package with npm pack, installs the tarball into a new project (as a
// service would), starts real servers, and runs the package's own tests
// (test/) against the installed copy.
package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/citest"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/hatest"
	"github.com/tollgate/tollgate/internal/shardfake"
)

func TestMain(m *testing.M) {
	code := m.Run()
	hatest.CleanBuilds()
	os.Exit(code)
}

func TestNodeClientPackage(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		citest.SkipOrFail(t, "node is not installed; install Node.js 18 or later to test the Node.js client")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		citest.SkipOrFail(t, "npm is not installed; install it with Node.js to test the Node.js client")
	}
	if _, err := os.Stat("node_modules/@grpc/grpc-js"); err != nil {
		citest.SkipOrFail(t, "clients/node/node_modules is missing: run `npm ci` in clients/node")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(dir, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// npm pack, then npm install the tarball into a new project, as a
	// service adds the package (its dependencies come from npm's cache,
	// which npm ci filled, or the registry).
	packDir := t.TempDir()
	tarball := filepath.Join(packDir, run(here, npm, "pack", "--silent", "--pack-destination", packDir))
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name":"app","private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(app, npm, "install", "--prefer-offline", "--no-audit", "--no-fund", "--silent", tarball)
	installed := filepath.Join(app, "node_modules", "@tollgate", "client")

	bin := hatest.Build(t, "github.com/tollgate/tollgate/cmd/tollgate")
	single := hatest.Standalone(t, bin)
	single.Start()
	cluster := hatest.StartCluster(t, bin, etcdtest.Start(t), 2, "--shards", "4") // each leads 2: the hint is followed per pool
	cluster.WaitBalanced(30*time.Second, cluster.Servers...)
	cluster.WaitLeader(30 * time.Second)

	sharded, nomap := shardfake.Start(t, 3, 12, false), shardfake.Start(t, 3, 12, true)

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", filepath.Join(here, "test"))
	cmd.Dir = app
	cmd.Env = append(os.Environ(),
		"TOLLGATE_BIN="+bin,
		"TOLLGATE_SERVER="+single.Addr,
		"TOLLGATE_CLUSTER="+strings.Join(cluster.Addrs(), ","),
		"TOLLGATE_SHARDED="+strings.Join(sharded.Addrs, ","),
		"TOLLGATE_SHARDED_NOMAP="+strings.Join(nomap.Addrs, ","),
		"TOLLGATE_CLIENT="+installed)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the Node.js client's tests failed: %v", err)
	}
	if !strings.Contains(string(out), "skipped 0") {
		t.Fatalf("some of the Node.js client's tests were skipped")
	}
	shardfake.CheckRouting(t, sharded, nomap)
}
