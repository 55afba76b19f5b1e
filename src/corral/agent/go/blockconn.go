package main

// The agent's HTTP connections, read and written by plain system calls on the serving
// goroutine's own thread (ppoll(2), then a non-blocking recv/send) instead of through the Go
// runtime's poller (epoll), as the listener is (listener.go).
//
// Why: gVisor (runsc 20240729) saves a process's epoll ready list as it finds it while it
// checkpoints, without the lock that guards the list, and the netstack still notifies while it
// saves (it resets the established connections then). An interest that was notified mid-save
// can be saved torn: marked not ready, yet still linked into the list. After the restore, the
// first notification of that interest pushes it onto the list's tail again, which cuts the list
// behind it: every interest queued behind it then stays marked ready and unlinked, and is never
// reported again (gVisor issue 13920; the mechanism and its fix, which rebuilds the list on
// restore instead of saving it, are gVisor PR 14147, merged in 2026 and not in this runsc). A
// connection accepted just after a restore is queued ready at once, so it was the usual
// victim: the first request on it was answered, the agent then waited in the poller for the
// second one forever (seen as an exec hanging after 2 in 6 wakes, while a new connection was
// answered). A thread waiting in ppoll registers afresh on the socket on every call, and a
// checkpoint interrupts the call and the restore restarts it, so nothing the agent waits on
// goes through a saved epoll instance: the Python agent's threads (blocked in recv) never had
// this either.
//
// A read waits in ppoll on the socket and an eventfd that a deadline change or Close signals:
// net/http aborts its background read by setting a deadline in the past and waits for the
// read to return, once per request. A write waits in ppoll on the socket alone (the server
// sets no write deadline); Close shuts the socket down, which wakes it. The descriptor is
// closed by whichever of Close and the last read or write in progress comes last, so a
// number is never used after it was given back.

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const pollOut = 0x4

type blockingConn struct {
	fd     int // the socket, non-blocking: every wait is a ppoll
	wake   int // eventfd (non-blocking): signalled by a read deadline change and by Close
	local  net.Addr
	remote net.Addr

	mu            sync.Mutex
	readDeadline  time.Time
	writeDeadline time.Time
	users         int  // reads and writes in progress
	closed        bool // Close was called
	released      bool // fd and wake are closed
}

func newBlockingConn(fd int) (*blockingConn, error) {
	wake, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0,
		syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errno != 0 {
		return nil, os.NewSyscallError("eventfd2", errno)
	}
	// As Go's net package does for every TCP connection: without it, a stream's small writes
	// (an exec's start and exit events) wait for the ACK of the one before, which the daemon's
	// side delays (measured: exec round trip 38 ms against 17 ms through the poller).
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); err != nil {
		syscall.Close(int(wake))
		return nil, os.NewSyscallError("setsockopt", err)
	}
	c := &blockingConn{fd: fd, wake: int(wake)}
	c.local = sockAddr(syscall.Getsockname(fd))
	c.remote = sockAddr(syscall.Getpeername(fd))
	return c, nil
}

func sockAddr(sa syscall.Sockaddr, err error) net.Addr {
	if in4, ok := sa.(*syscall.SockaddrInet4); ok && err == nil {
		return &net.TCPAddr{IP: net.IP(in4.Addr[:]).To4(), Port: in4.Port}
	}
	return &net.TCPAddr{}
}

// enter counts a read or write in progress; false once the connection is closed.
func (c *blockingConn) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.users++
	return true
}

func (c *blockingConn) leave() {
	c.mu.Lock()
	c.users--
	release := c.closed && c.users == 0 && !c.released
	if release {
		c.released = true
	}
	c.mu.Unlock()
	if release {
		c.release()
	}
}

func (c *blockingConn) release() {
	syscall.Close(c.fd)
	syscall.Close(c.wake)
}

func (c *blockingConn) signal() {
	one := uint64(1)
	syscall.Write(c.wake, (*[8]byte)(unsafe.Pointer(&one))[:]) // EAGAIN: already signalled
}

func (c *blockingConn) drain() {
	var buf [8]byte
	syscall.Read(c.wake, buf[:])
}

// timeLeft is the ppoll timeout until deadline: nil for none; false once it has passed.
func timeLeft(deadline time.Time) (*syscall.Timespec, bool) {
	if deadline.IsZero() {
		return nil, true
	}
	left := time.Until(deadline)
	if left <= 0 {
		return nil, false
	}
	ts := syscall.NsecToTimespec(left.Nanoseconds())
	return &ts, true
}

// ppoll waits for fds (one or two) until an event or timeout (nil: none); EINTR is returned.
func ppoll(fds []pollFd, timeout *syscall.Timespec) error {
	_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])),
		uintptr(len(fds)), uintptr(unsafe.Pointer(timeout)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func (c *blockingConn) opError(op string, err error) error {
	if err == os.ErrDeadlineExceeded || err == net.ErrClosed {
		return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote,
		Err: os.NewSyscallError(op, err)}
}

func (c *blockingConn) Read(b []byte) (int, error) {
	if !c.enter() {
		return 0, c.opError("read", net.ErrClosed)
	}
	defer c.leave()
	for {
		c.mu.Lock()
		closed, deadline := c.closed, c.readDeadline
		c.mu.Unlock()
		if closed {
			return 0, c.opError("read", net.ErrClosed)
		}
		timeout, ok := timeLeft(deadline)
		if !ok {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		if len(b) == 0 {
			return 0, nil
		}
		n, _, err := syscall.Recvfrom(c.fd, b, syscall.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err != syscall.EAGAIN && err != syscall.EINTR:
			return 0, c.opError("read", err)
		}
		fds := []pollFd{{fd: int32(c.fd), events: pollIn}, {fd: int32(c.wake), events: pollIn}}
		if err := ppoll(fds, timeout); err != nil && err != syscall.EINTR {
			return 0, c.opError("read", err)
		}
		if fds[1].revents != 0 {
			c.drain() // a deadline changed or Close: the loop's head looks again
		}
	}
}

func (c *blockingConn) Write(b []byte) (int, error) {
	if !c.enter() {
		return 0, c.opError("write", net.ErrClosed)
	}
	defer c.leave()
	written := 0
	for written < len(b) {
		c.mu.Lock()
		closed, deadline := c.closed, c.writeDeadline
		c.mu.Unlock()
		if closed {
			return written, c.opError("write", net.ErrClosed)
		}
		timeout, ok := timeLeft(deadline)
		if !ok {
			return written, c.opError("write", os.ErrDeadlineExceeded)
		}
		n, err := syscall.SendmsgN(c.fd, b[written:], nil, nil, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
		if err == nil {
			written += n
			continue
		}
		if err != syscall.EAGAIN && err != syscall.EINTR {
			return written, c.opError("write", err)
		}
		fds := []pollFd{{fd: int32(c.fd), events: pollOut}}
		if err := ppoll(fds, timeout); err != nil && err != syscall.EINTR {
			return written, c.opError("write", err)
		}
	}
	return written, nil
}

// Close wakes the reads and writes in progress (their descriptor is shut down and the eventfd
// signalled); the descriptors are closed once the last of them has returned. Close counts as
// a user while it wakes them, so that the last of them cannot close the descriptors under it.
func (c *blockingConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opError("close", net.ErrClosed)
	}
	c.closed = true
	c.users++
	c.mu.Unlock()
	syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	c.signal()
	c.leave()
	return nil
}

// CloseWrite shuts the sending side down (net/http does before closing a connection it
// answered with Connection: close, as on a *net.TCPConn).
func (c *blockingConn) CloseWrite() error {
	if !c.enter() {
		return c.opError("close", net.ErrClosed)
	}
	defer c.leave()
	if err := syscall.Shutdown(c.fd, syscall.SHUT_WR); err != nil {
		return c.opError("shutdown", err)
	}
	return nil
}

func (c *blockingConn) LocalAddr() net.Addr  { return c.local }
func (c *blockingConn) RemoteAddr() net.Addr { return c.remote }

func (c *blockingConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.mu.Unlock()
	c.wakeReader()
	return nil
}

func (c *blockingConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	c.wakeReader()
	return nil
}

// wakeReader makes a read in progress look at its deadline again (after Close, whose own
// signal wakes it, the eventfd may already be closed and its number another file's).
func (c *blockingConn) wakeReader() {
	if c.enter() {
		c.signal()
		c.leave()
	}
}

// SetWriteDeadline applies to the next wait of a write (no write is woken for it: the server
// sets no write deadline).
func (c *blockingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.mu.Unlock()
	return nil
}

// control runs f on the socket's descriptor unless the connection is closed (conns.go reads
// the TCP state with it).
func (c *blockingConn) control(f func(fd int)) bool {
	if !c.enter() {
		return false
	}
	defer c.leave()
	f(c.fd)
	return true
}
