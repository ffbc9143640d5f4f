package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// childEnv makes the test binary run as a worker (see TestMain), so that
// the test can start workers as separate processes, and kill one.
const childEnv = "TOLLGATE_WORKERS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "workers:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Two worker processes offer 2 slots each; a submitter sends 60 jobs, 6
// at a time. Halfway, one worker is killed with SIGKILL: its slots leave
// the pool, the jobs it held are sent again, and every job is done. No
// worker ever ran more jobs at once than its slots.
func TestWorkersShareTheirSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg := server.New(server.Config{})
	if _, err := tg.Engine().CreatePool(limiter.PoolConfig{Name: "render", ResourceKind: limiter.ResourcePassive, Selection: limiter.SelectSpread}); err != nil {
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

	type worker struct {
		cmd    *exec.Cmd
		out    syncBuffer
		exited chan struct{}
	}
	workers := map[string]*worker{}
	for _, id := range []string{"w1", "w2"} {
		w := &worker{exited: make(chan struct{})}
		w.cmd = exec.CommandContext(ctx, os.Args[0], "-tollgate", lis.Addr().String(), "-pool", "render", "serve", "-id", id, "-slots", "2")
		w.cmd.Env = append(os.Environ(), childEnv+"=1")
		w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = w.cmd.Wait(); close(w.exited) }()
		workers[id] = w
	}
	defer func() {
		for _, w := range workers {
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := tg.Engine().GetPool("render")
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Resources == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workers' slots did not join the pool: %+v\nw1: %s\nw2: %s", info.Status, workers["w1"].out.String(), workers["w2"].out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	var out syncBuffer
	submitted := make(chan error, 1)
	go func() {
		submitted <- run(ctx, []string{"-tollgate", lis.Addr().String(), "-pool", "render", "submit", "-jobs", "60", "-parallel", "6"}, &out)
	}()
	for { // kill w1 once some jobs are done
		info, _ := tg.Engine().GetPool("render")
		if info.Status.Released >= 15 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no jobs done: %+v", info.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := workers["w1"].cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-workers["w1"].exited
	if err := <-submitted; err != nil {
		t.Fatalf("submit: %v\nw2: %s", err, workers["w2"].out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	for id, w := range workers {
		if strings.Contains(w.out.String(), "OVERLOAD") {
			t.Errorf("worker %s ran more jobs at once than its slots:\n%s", id, w.out.String())
		}
	}
	m := regexp.MustCompile(`map\[(.*)\]`).FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(m[1], "w2:") {
		t.Fatalf("submit printed %q", out.String())
	}
	info, err := tg.Engine().GetPool("render")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Resources != 2 || info.Status.Providers != 1 || info.Status.Held != 0 {
		t.Fatalf("after w1's death: %+v (want w2's 2 slots, nothing held)", info.Status)
	}
}
