package hatest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a process the test starts, and may kill (-9), freeze (SIGSTOP),
// thaw (SIGCONT), terminate (SIGTERM) and start again. Each run logs to
// its own file.
type Proc struct {
	t      testing.TB
	name   string
	bin    string
	args   []string
	logDir string
	runs   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// NewProc returns a Proc that runs bin with args; it is killed when t
// ends.
func NewProc(t testing.TB, name, bin string, args ...string) *Proc {
	p := &Proc{t: t, name: name, bin: bin, args: args, logDir: t.TempDir()}
	t.Cleanup(p.Kill)
	return p
}

// Start starts a new run of the process.
func (p *Proc) Start() {
	p.t.Helper()
	if p.cmd != nil {
		p.t.Fatalf("hatest: %s is running already", p.name)
	}
	p.runs++
	logf, err := os.Create(p.logPath(p.runs))
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Dir = p.logDir // whatever it writes by default stays out of the tree
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("hatest: starting %s: %v", p.name, err)
	}
	cmd, exited := p.cmd, make(chan struct{})
	p.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
}

// Bin is the program the process runs.
func (p *Proc) Bin() string { return p.bin }

// Running reports whether a run is under way (it may be stopped).
func (p *Proc) Running() bool { return p.cmd != nil }

// Exited is closed when the current run has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Kill kills the run with SIGKILL (a frozen one too) and waits for it.
// Killing nothing does nothing.
func (p *Proc) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// Freeze stops the run with SIGSTOP.
func (p *Proc) Freeze() { p.signal(syscall.SIGSTOP) }

// Thaw continues a frozen run with SIGCONT.
func (p *Proc) Thaw() { p.signal(syscall.SIGCONT) }

// Terminate sends SIGTERM and waits up to timeout for the run to exit
// (then kills it); it reports whether the run exited by itself.
func (p *Proc) Terminate(timeout time.Duration) bool {
	if p.cmd == nil {
		return true
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		p.cmd = nil
		return true
	case <-time.After(timeout):
		p.Kill()
		return false
	}
}

func (p *Proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if p.cmd == nil {
		p.t.Fatalf("hatest: %s is not running", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("hatest: %v to %s: %v", sig, p.name, err)
	}
}

func (p *Proc) logPath(run int) string {
	return filepath.Join(p.logDir, fmt.Sprintf("run-%d.log", run))
}

// Log returns the output of run n (from 1).
func (p *Proc) Log(n int) string {
	b, _ := os.ReadFile(p.logPath(n))
	return string(b)
}

// LastLog returns the output of the last run.
func (p *Proc) LastLog() string { return p.Log(p.runs) }

// CheckLogs fails the test if a run reported a data race, a panic, or
// any of also (such as "level=ERROR").
func (p *Proc) CheckLogs(also ...string) {
	p.t.Helper()
	for i := 1; i <= p.runs; i++ {
		l := p.Log(i)
		for _, bad := range append([]string{"WARNING: DATA RACE", "panic:"}, also...) {
			if strings.Contains(l, bad) {
				p.t.Errorf("%s run %d logged %q:\n%s", p.name, i, bad, l)
			}
		}
	}
}

// WaitListening waits until addr accepts connections, or fails the test
// when the run exits first or 20s pass.
func (p *Proc) WaitListening(addr string) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-p.exited:
			p.cmd = nil
			p.t.Fatalf("hatest: %s exited before listening on %s:\n%s", p.name, addr, p.LastLog())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("hatest: %s did not listen on %s within 20s: %v\n%s", p.name, addr, err, p.LastLog())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// Build builds the main package pkg (an import path) once per test
// binary, with the race detector when the test has it, and returns the
// path of the program. CleanBuilds removes them.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if bin, ok := builds.bins[pkg]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "hatest-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = dir, map[string]string{}
	}
	bin := filepath.Join(builds.dir, filepath.Base(pkg))
	GoBuild(t, pkg, bin)
	builds.bins[pkg] = bin
	return bin
}

// GoBuild builds the main package pkg (an import path, or a directory
// such as ".") into out, with the race detector when the test has it.
func GoBuild(t testing.TB, pkg, out string) {
	t.Helper()
	args := []string{"build", "-o", out}
	if raceEnabled() {
		args = append(args, "-race")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("hatest: go is not on PATH: %v", err)
	}
	if b, err := exec.Command(goBin, append(args, pkg)...).CombinedOutput(); err != nil {
		t.Fatalf("hatest: go build %s: %v\n%s", pkg, err, b)
	}
}

// CleanBuilds removes what Build built; call it from TestMain.
func CleanBuilds() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir, builds.bins = "", nil
	}
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// CPU returns the CPU time (user and system) the current run has used so
// far, read from /proc (Linux).
func (p *Proc) CPU() (time.Duration, error) {
	if p.cmd == nil {
		return 0, fmt.Errorf("hatest: %s is not running", p.name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): utime and stime are the 12th and 13th.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("hatest: /proc/%d/stat: %q", p.cmd.Process.Pid, s)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux Go supports.
const clockTicks = 100
