// Package python holds the test of the Python client package: it installs
// the package into a virtual environment over Debian's grpcio and
// protobuf (pip install --no-deps --no-build-isolation, as a service
// would), starts real servers, and runs the package's own tests
// (tests/) against them.
package python

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

// debianPython is the interpreter python3-grpcio and python3-protobuf
// install for.
const debianPython = "/usr/bin/python3"

func TestMain(m *testing.M) {
	code := m.Run()
	hatest.CleanBuilds()
	os.Exit(code)
}

func TestPythonClient(t *testing.T) {
	if exec.Command(debianPython, "-c", "import grpc, google.protobuf, venv, ensurepip").Run() != nil {
		citest.SkipOrFail(t, debianPython+" cannot import grpc, google.protobuf, venv and ensurepip: apt-get install python3-grpcio python3-protobuf python3-venv python3-pip python3-setuptools python3-wheel")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	venv := filepath.Join(t.TempDir(), "venv")
	run(debianPython, "-m", "venv", "--system-site-packages", venv)
	py := filepath.Join(venv, "bin", "python")
	// pip builds in the directory it installs from: a copy, so that the
	// source tree gets no build/ or egg-info.
	src := filepath.Join(t.TempDir(), "tollgate-client")
	if err := os.CopyFS(src, os.DirFS(here)); err != nil {
		t.Fatal(err)
	}
	run(py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", src)

	bin := hatest.Build(t, "github.com/tollgate/tollgate/cmd/tollgate")
	single := hatest.Standalone(t, bin)
	single.Start()
	cluster := hatest.StartCluster(t, bin, etcdtest.Start(t), 2, "--shards", "4") // each leads 2: the hint is followed per pool
	cluster.WaitBalanced(30*time.Second, cluster.Servers...)
	cluster.WaitLeader(30 * time.Second)

	sharded, nomap := shardfake.Start(t, 3, 12, false), shardfake.Start(t, 3, 12, true)
	shardedAio, nomapAio := shardfake.Start(t, 3, 12, false), shardfake.Start(t, 3, 12, true)

	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", filepath.Join(here, "tests"))
	cmd.Dir = t.TempDir() // not the source tree: the installed package is what is tested
	cmd.Env = append(os.Environ(),
		"TOLLGATE_BIN="+bin,
		"TOLLGATE_SERVER="+single.Addr,
		"TOLLGATE_CLUSTER="+strings.Join(cluster.Addrs(), ","),
		"TOLLGATE_SHARDED="+strings.Join(sharded.Addrs, ","),
		"TOLLGATE_SHARDED_NOMAP="+strings.Join(nomap.Addrs, ","),
		"TOLLGATE_SHARDED_AIO="+strings.Join(shardedAio.Addrs, ","),
		"TOLLGATE_SHARDED_NOMAP_AIO="+strings.Join(nomapAio.Addrs, ","))
	out, err := cmd.CombinedOutput()
	t.Logf("python -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("some of the Python client's tests were skipped")
	}
	shardfake.CheckRouting(t, sharded, nomap)
	shardfake.CheckRouting(t, shardedAio, nomapAio)
}
