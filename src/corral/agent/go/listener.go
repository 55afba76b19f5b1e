package main

// The agent's listening socket, accepted from with a blocking accept4(2) on a thread of its own
// rather than through the Go runtime's poller (epoll).
//
// Why: a sandbox is checkpointed (park, fork, snapshot, warm template) with its network attached,
// so gVisor resets every established TCP connection while it saves (--net-disconnect-ok). When one
// of those connections is registered with a process's epoll instance, as every net.Conn of a Go
// server is, that instance no longer reports the listening socket after the restore: the
// netstack completes the handshakes, connections queue up, and a Go server waiting in
// net.Listener.Accept never wakes (measured with runsc 20240729: a Go server holding one
// keep-alive connection at the checkpoint answers nothing after the restore, while the same
// server without a connection, a blocking accept in the same process, and sockets registered
// after the restore all work; gVisor issue 13920, fixed upstream by rebuilding the epoll ready
// list on restore, PR 14147). The daemon always holds a connection to the agent when it parks a
// sandbox, so a restored Go agent never answered.
//
// A blocking accept waits on the socket itself, and the restore restarts it like any other
// interrupted system call, which is also why the Python agent (a thread blocked in accept) was
// never affected. Accepted connections are not handed to the poller either (blockconn.go: a
// registration made after the restore can be lost as well). Connections from before a checkpoint
// are dead after it anyway (their peer was the host side of the old slot).

import (
	"errors"
	"net"
	"os"
	"syscall"
)

const listenBacklog = 128 // as the Python agent's listen()

type blockingListener struct {
	fd   int
	addr *net.TCPAddr
}

// listen binds host:port (IPv4) with SO_REUSEADDR and listens, leaving the socket blocking.
func listen(host string, port int) (net.Listener, error) {
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return nil, &net.AddrError{Err: "not an IPv4 address", Addr: host}
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	sa := &syscall.SockaddrInet4{Port: port}
	copy(sa.Addr[:], ip)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	if err := syscall.Listen(fd, listenBacklog); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("listen", err)
	}
	addr := &net.TCPAddr{IP: ip, Port: port}
	if bound, err := syscall.Getsockname(fd); err == nil {
		if in4, ok := bound.(*syscall.SockaddrInet4); ok {
			addr = &net.TCPAddr{IP: net.IP(in4.Addr[:]).To4(), Port: in4.Port}
		}
	}
	return &blockingListener{fd: fd, addr: addr}, nil
}

// temporaryError makes http.Server back off and retry rather than stop serving (out of fds).
type temporaryError struct{ err error }

func (e temporaryError) Error() string   { return e.err.Error() }
func (e temporaryError) Unwrap() error   { return e.err }
func (e temporaryError) Timeout() bool   { return false }
func (e temporaryError) Temporary() bool { return true }

// Accept blocks in accept4(2) (the goroutine's thread leaves its P to the others meanwhile).
func (l *blockingListener) Accept() (net.Conn, error) {
	for {
		fd, _, err := syscall.Accept4(l.fd, syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK)
		if err != nil {
			switch {
			case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ECONNABORTED),
				errors.Is(err, syscall.EAGAIN):
				continue // a signal, or the peer left before the accept
			case errors.Is(err, syscall.EBADF), errors.Is(err, syscall.EINVAL):
				return nil, net.ErrClosed
			}
			return nil, temporaryError{os.NewSyscallError("accept4", err)}
		}
		conn, err := newBlockingConn(fd) // never registered with the poller (blockconn.go)
		if err != nil {
			syscall.Close(fd)
			return nil, temporaryError{err}
		}
		return conn, nil
	}
}

func (l *blockingListener) Close() error {
	_ = syscall.Shutdown(l.fd, syscall.SHUT_RDWR) // wakes a blocked accept
	return syscall.Close(l.fd)
}

func (l *blockingListener) Addr() net.Addr { return l.addr }
