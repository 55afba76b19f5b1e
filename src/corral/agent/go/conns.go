package main

// The agent's open HTTP connections, and closing those that a checkpoint left dead.
//
// Why: gVisor resets every established TCP connection while it checkpoints a sandbox
// (--net-disconnect-ok). Connections are read in ppoll(2) on their own threads (blockconn.go),
// which a checkpoint interrupts and the restore restarts, so a reset connection's read fails
// after the restore by itself, as the Python agent's recv(2) does. When connections still went
// through the Go runtime's poller, whose registrations made before a checkpoint were never
// reported after it (gVisor issue 13920, listener.go), a connection the daemon held when it
// parked, forked or snapshotted the sandbox stayed dead but unreported: the goroutine serving it
// waited forever, with its descriptor, its buffers and, for an event stream, its follower
// (measured then: one to two sockets more in /proc/1/fd after every few park/wake cycles).
//
// Kept as a second line: every restore is followed by the daemon's POST /rekey (keys.py), and
// the rekey closes each tracked connection that the kernel no longer holds as established
// (TCP_INFO's state): Close wakes the goroutine waiting on it, net/http then cancels its
// request's context, and a stream handler detaches its follower. Live connections, the rekey's
// own among them, are left alone.

import (
	"net"
	"net/http"
	"sync"
	"syscall"
	"unsafe"
)

const (
	tcpInfoOpt     = 11 // TCP_INFO
	tcpEstablished = 1  // tcp_info.tcpi_state of a live connection
)

type connTable struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newConnTable() *connTable {
	return &connTable{conns: map[net.Conn]struct{}{}}
}

// track is the http.Server's ConnState hook.
func (t *connTable) track(c net.Conn, state http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch state {
	case http.StateNew:
		t.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	}
}

// closeDead closes every tracked connection whose socket is no longer established (reset by a
// checkpoint: CLOSE; or closed by its peer while the checkpoint froze the agent: CLOSE_WAIT,
// whose end of file the poller would never report either); returns how many it closed.
func (t *connTable) closeDead() int {
	t.mu.Lock()
	var dead []net.Conn
	for c := range t.conns {
		if state, ok := tcpState(c); ok && state != tcpEstablished {
			dead = append(dead, c)
		}
	}
	t.mu.Unlock()
	for _, c := range dead {
		_ = c.Close() // the server's StateClosed removes it from the table
	}
	return len(dead)
}

// tcpState is the kernel's tcpi_state of c's socket; false when it cannot be read.
func tcpState(c net.Conn) (uint8, bool) {
	bc, ok := c.(*blockingConn)
	if !ok {
		return 0, false
	}
	var info [232]byte // struct tcp_info; its first byte is the state
	size := uint32(len(info))
	var errno syscall.Errno
	if !bc.control(func(fd int) {
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), syscall.IPPROTO_TCP,
			tcpInfoOpt, uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	}) || errno != 0 || size < 1 {
		return 0, false
	}
	return info[0], true
}
