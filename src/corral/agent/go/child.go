package main

// Starting a child: on pipes (stdin optional) or on a new PTY, with its credentials, working
// directory and environment; the PTY's window size.

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"
)

type child struct {
	pid    int
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	master *os.File
}

func pipe() (r, w int, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	return fds[0], fds[1], nil
}

// ourEnd wraps the agent's end of a pipe, left blocking: its reader (pump) or writer waits in
// read(2) or write(2) on a thread of its own, as the Python agent's threads do, never in the
// runtime's poller, whose registrations from before a checkpoint may never be reported after
// the restore (listener.go). A PTY's master is blocking likewise.
func ourEnd(fd int, name string) *os.File {
	return os.NewFile(uintptr(fd), name)
}

var devNullFd = -1
var devNullOnce sync.Once

func devNull() int {
	devNullOnce.Do(func() {
		devNullFd, _ = syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	})
	return devNullFd
}

// startPiped starts argv in a new session with pipes on its stdout and stderr and a pipe or
// /dev/null on its stdin; every other fd of the agent is close-on-exec.
func startPiped(file string, argv, env []string, cwd string, cred *syscall.Credential, withStdin bool) (*child, error) {
	var opened []int
	closeAll := func() {
		for _, fd := range opened {
			syscall.Close(fd)
		}
	}
	inR, inW := devNull(), -1
	if withStdin {
		r, w, err := pipe()
		if err != nil {
			return nil, err
		}
		inR, inW = r, w
		opened = append(opened, r, w)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	opened = append(opened, outR, outW)
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	opened = append(opened, errR, errW)
	<-initGuarded
	pid, err := syscall.ForkExec(file, argv, &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{uintptr(inR), uintptr(outW), uintptr(errW)},
		Sys:   &syscall.SysProcAttr{Setsid: true, Credential: cred},
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	if withStdin {
		syscall.Close(inR)
	}
	syscall.Close(outW)
	syscall.Close(errW)
	c := &child{pid: pid, stdout: ourEnd(outR, "stdout"), stderr: ourEnd(errR, "stderr")}
	if withStdin {
		c.stdin = ourEnd(inW, "stdin")
	}
	return c, nil
}

func ioctl(fd int, req uintptr, arg uintptr) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, arg); e != 0 {
		return e
	}
	return nil
}

func setWindowSize(fd int, rows, cols int) error {
	ws := [4]uint16{uint16(rows), uint16(cols), 0, 0}
	return ioctl(fd, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
}

// startPty starts argv on a new pseudo-terminal as its controlling tty (new session,
// TIOCSCTTY); the agent keeps the master (reads are the output, writes go through the line
// discipline).
func startPty(file string, argv, env []string, cwd string, cred *syscall.Credential, rows, cols int) (*child, error) {
	master, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var unlock int32
	if err := ioctl(master, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); err != nil {
		syscall.Close(master)
		return nil, err
	}
	var n uint32
	if err := ioctl(master, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); err != nil {
		syscall.Close(master)
		return nil, err
	}
	slave, err := syscall.Open("/dev/pts/"+strconv.Itoa(int(n)), syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(master)
		return nil, err
	}
	defer syscall.Close(slave)
	if err := setWindowSize(master, rows, cols); err != nil {
		syscall.Close(master)
		return nil, err
	}
	<-initGuarded
	pid, err := syscall.ForkExec(file, argv, &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{uintptr(slave), uintptr(slave), uintptr(slave)},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred},
	})
	if err != nil {
		syscall.Close(master)
		return nil, err
	}
	writer, err := syscall.Dup(master)
	if err != nil {
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Close(master)
		return nil, err
	}
	syscall.CloseOnExec(writer)
	m := os.NewFile(uintptr(master), "pty")
	return &child{pid: pid, stdin: os.NewFile(uintptr(writer), "pty-in"), stdout: m, master: m}, nil
}

// resize sets the window size of a PTY process's terminal.
func (p *Process) resize(body object) error {
	raw, _ := json.Marshal(body)
	rows, cols, err := parseWinsize(raw)
	if err != nil {
		return err
	}
	if p.winsize == nil {
		return newError(409, "conflict", "process %d has no terminal (not started with 'pty')", p.pid)
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil || !p.running() {
		return newError(409, "conflict", "process %d has already finished", p.pid)
	}
	if err := setWindowSize(int(p.stdin.Fd()), rows, cols); err != nil {
		return newError(409, "conflict", "cannot resize the terminal of process %d: %s", p.pid, strerror(err))
	}
	p.mu.Lock()
	p.winsize = &[2]int{rows, cols}
	p.mu.Unlock()
	return nil
}
