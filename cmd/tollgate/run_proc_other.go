//go:build !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// forwardedSignals are the signals tollgate run passes on to its command.
var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// commandProc is a command started as an ordinary child: outside Linux,
// tollgate run neither gives it a process group of its own nor outlives
// it with a keeper (see the run command's help).
type commandProc struct {
	cmd *exec.Cmd
}

func startCommand(cmd *exec.Cmd) (*commandProc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &commandProc{cmd: cmd}, nil
}

func (p *commandProc) wait() error { return p.cmd.Wait() }

// signal sends sig to the command process.
func (p *commandProc) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = p.cmd.Process.Kill()
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// stopped never reports: stops are left to the terminal.
func (p *commandProc) stopped() <-chan struct{} { return nil }

func (p *commandProc) suspend() {}

// end kills the command if it is still running.
func (p *commandProc) end() { _ = p.cmd.Process.Kill() }
