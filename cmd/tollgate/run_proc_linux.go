package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// keeperArg0 is the argv[0] under which the tollgate binary runs as the
// keeper of a command's process group (see startCommand).
const keeperArg0 = "tollgate-run-keeper"

// The keeper is this same binary, started again: it must act before main
// (and before a test binary's TestMain), so it is dispatched here.
func init() {
	if len(os.Args) == 1 && os.Args[0] == keeperArg0 {
		keepGroup()
	}
}

// keepGroup is the keeper's whole life: it is the first member of the
// command's process group, holds the read end of a pipe whose write end
// only tollgate run holds, and when that pipe reaches end of file (tollgate
// run exited or was killed, however) it kills its process group. It
// catches every signal it can, since those sent to the group are for the
// command.
func keepGroup() {
	signal.Notify(make(chan os.Signal, 1))
	lifeline := os.NewFile(3, "lifeline")
	_, _ = io.Copy(io.Discard, lifeline)
	_ = syscall.Kill(0, syscall.SIGKILL)
	os.Exit(1)
}

// forwardedSignals are the signals tollgate run passes on to its command's
// process group, once each.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// cldStopped is siginfo's si_code for a child that stopped.
const cldStopped = 5

// commandProc is a command started in a process group of its own, with a
// keeper that kills the group if tollgate run dies, and with the terminal
// while it runs, when tollgate run had it.
type commandProc struct {
	cmd      *exec.Cmd
	pgid     int
	keeper   *exec.Cmd
	lifeline *os.File      // the write end of the keeper's pipe
	tty      int           // the command's stdin when it is a terminal, or -1
	stops    chan struct{} // the command stopped (SIGTSTP, SIGTTIN, SIGSTOP...)
	exited   chan struct{} // closed by wait
}

// startCommand starts cmd in a new process group led by a keeper process,
// so that the whole group dies with tollgate run (see keepGroup); the
// command itself also gets SIGKILL if the thread that started it ends.
func startCommand(cmd *exec.Cmd) (*commandProc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	keeper := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{keeperArg0},
		ExtraFiles:  []*os.File{r},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = keeper.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("cannot start the process that keeps the command's process group: %w", err)
	}
	p := &commandProc{cmd: cmd, pgid: keeper.Process.Pid, keeper: keeper, lifeline: w, tty: -1, stops: make(chan struct{}, 1), exited: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: p.pgid, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that forks, not the process: this
		// thread stays until the command has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			<-p.exited
		}
	}()
	if err := <-started; err != nil {
		p.end()
		return nil, err
	}
	if f, ok := cmd.Stdin.(*os.File); ok {
		if _, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP); err == nil {
			p.tty = int(f.Fd())
			p.giveTerminal()
		}
	}
	go p.watchStops()
	return p, nil
}

// giveTerminal gives the terminal to the command's group if tollgate
// run's has it.
func (p *commandProc) giveTerminal() {
	if pg, err := unix.IoctlGetInt(p.tty, unix.TIOCGPGRP); err == nil && pg == syscall.Getpgrp() {
		_ = unix.IoctlSetPointerInt(p.tty, unix.TIOCSPGRP, p.pgid)
	}
}

// hasTerminal reports whether the command's group has the terminal.
func (p *commandProc) hasTerminal() bool {
	if p.tty < 0 {
		return false
	}
	pg, err := unix.IoctlGetInt(p.tty, unix.TIOCGPGRP)
	return err == nil && pg == p.pgid
}

// watchStops sends on p.stops each time the command stops, until it exits
// (which it leaves for cmd.Wait to collect).
func (p *commandProc) watchStops() {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || info.Code != cldStopped {
			return
		}
		_ = unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOHANG, nil) // consume the stop
		select {
		case p.stops <- struct{}{}:
		default:
		}
	}
}

// wait waits for the command to exit.
func (p *commandProc) wait() error {
	err := p.cmd.Wait()
	close(p.exited)
	return err
}

// signal sends sig to the command's whole process group.
func (p *commandProc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.pgid, sig)
}

// stopped is where each stop of the command is reported.
func (p *commandProc) stopped() <-chan struct{} { return p.stops }

// suspend follows a stop of the command as a shell would expect: with a
// job-control shell above tollgate run, it takes the terminal back and
// stops tollgate run's own job; once continued, it gives the terminal back
// if its job has it and continues the command. Without one, nothing would
// continue a stopped job: a command that has the terminal is continued at
// once (Ctrl-Z does nothing), and any other is left stopped, as it would be
// without tollgate.
func (p *commandProc) suspend() {
	switch {
	case jobControl():
		p.takeTerminal()
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		_ = syscall.Kill(0, syscall.SIGTSTP)
		<-cont
		signal.Stop(cont)
		if p.tty >= 0 {
			p.giveTerminal()
		}
	case !p.hasTerminal():
		return
	}
	p.signal(syscall.SIGCONT)
}

// jobControl reports whether tollgate run's parent put it in a job of its
// own (a process group apart from the parent's, in the same session), as a
// job-control shell does: only then does a stopped tollgate run get
// continued.
func jobControl() bool {
	ppid := syscall.Getppid()
	ppg, err := syscall.Getpgid(ppid)
	if err != nil || ppg == syscall.Getpgrp() {
		return false
	}
	psid, err1 := unix.Getsid(ppid)
	sid, err2 := unix.Getsid(0)
	return err1 == nil && err2 == nil && psid == sid
}

// takeTerminal gives the terminal back to tollgate run's process group if
// the command's group has it.
func (p *commandProc) takeTerminal() {
	if p.tty < 0 {
		return
	}
	// A process outside the foreground group that sets it is sent SIGTTOU
	// unless it ignores it; the command has already started, so ignoring
	// it for this moment changes nothing the command inherits.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if p.hasTerminal() {
		_ = unix.IoctlSetPointerInt(p.tty, unix.TIOCSPGRP, syscall.Getpgrp())
	}
}

// end kills what is left of the command's process group (the keeper, and
// anything the command left running), takes the terminal back and reaps
// the keeper. Nothing of the group outlives the lease.
func (p *commandProc) end() {
	p.signal(syscall.SIGKILL)
	p.takeTerminal()
	p.lifeline.Close()
	_ = p.keeper.Wait()
}
