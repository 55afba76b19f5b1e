// Command corral-agent is the in-sandbox agent written in Go (standard library only): the init
// process of every sandbox, serving docs/agent-protocol.md exactly as the Python agent
// (src/corral/agent/*.py, the reference) does.
//
// Files: main.go (start, PID 1 duties, key hand-over); the HTTP side: server.go (serving,
// authorization, dispatch, rekey), routes_processes.go and routes_files.go (the routes),
// apierrors.go (error answers), jsonfields.go (request fields), listener.go, blockconn.go and
// conns.go (the listening socket, reading and writing a connection, connections across a
// checkpoint); the processes: table.go (the process table, the reaper, restarts), spawn.go
// (spawning), spawnspec.go (reading a spawn request), child.go (starting a child on pipes or a
// PTY), process.go (one process's event log and followers); files.go (file operations),
// watch.go (inotify watches), oom.go (the sandbox's OOM killer), diskroot.go (the sized root and
// dropping CAP_SYS_ADMIN), cpus.go (the CPU count its processes see), starttrace.go (the
// start's steps, timed on request).
//
// Randomness: everything random (boot ids, upload temporaries) comes from crypto/rand, which
// reads getrandom(2) on every call and keeps no state, so a fork of a checkpointed agent copies
// no generator state; /rekey's seed has nothing of the agent's own to reseed.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

const (
	envPrefix   = "CORRAL_AGENT_"
	defaultPort = 49983
	defaultHost = "0.0.0.0"
	keyHexLen   = 64
	maxHandover = 4096
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "corral agent: "+format+"\n", args...)
}

// readBootKey reads the one line of hex the daemon wrote on stdin, then puts /dev/null on fd 0
// so no child inherits the pipe. Empty when there was no valid key.
func readBootKey() string {
	var data []byte
	buf := make([]byte, maxHandover)
	for len(data) < maxHandover && !strings.Contains(string(data), "\n") {
		n, err := syscall.Read(0, buf[:maxHandover-len(data)])
		if n <= 0 || err != nil {
			break
		}
		data = append(data, buf[:n]...)
	}
	if null, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0); err == nil {
		if null != 0 {
			_ = syscall.Dup3(null, 0, 0)
			syscall.Close(null)
		}
	}
	key := strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0])
	if validKey(key) {
		return key
	}
	return ""
}

func validKey(key string) bool {
	if len(key) != keyHexLen {
		return false
	}
	for _, c := range key {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// initGuarded is closed once guardInitSignals has run: children are started only after it
// (before each ForkExec, child.go), so none can signal the agent before it survives signals.
var initGuarded = make(chan struct{})

// guardInitSignals: as PID 1, survive stray signals from inside the sandbox. Caught (not
// ignored), so children get the default dispositions back on exec. Run beside the first
// requests (signal.Notify starts a thread, ~1.5 ms in gVisor): until it has run, the sandbox
// holds no process but the agent, and starting a child waits for it.
func guardInitSignals() {
	defer close(initGuarded)
	if os.Getpid() != 1 {
		return
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for range ch {
		}
	}()
}

// becomeSubreaper: when not PID 1 (tests, debugging), still adopt orphans so they are reaped here.
func becomeSubreaper() {
	if os.Getpid() == 1 {
		return
	}
	const prSetChildSubreaper = 36
	_, _, _ = syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0)
}

func settleRoot() {
	disk := os.Getenv(envPrefix + "DISK_ROOT")
	if disk == "" && !hasSysAdmin() {
		presentCPUs(false)
		return
	}
	if disk != "" {
		if err := enterDiskRoot(disk); err != nil {
			fmt.Fprintf(os.Stderr, "corral agent: root stays on the image: %v\n", err)
		}
	}
	startStep("diskroot")
	presentCPUs(true)
	startStep("cpus")
	if err := dropSysAdmin(); err != nil {
		fmt.Fprintf(os.Stderr, "corral agent: %v\n", err)
		os.Exit(1)
	}
}

func main() {
	startStep("main")
	port := defaultPort
	if v := os.Getenv(envPrefix + "PORT"); v != "" {
		if p, err := strconv.Atoi(v); err == nil {
			port = p
		}
	}
	host := os.Getenv(envPrefix + "HOST")
	if host == "" {
		host = defaultHost
	}
	// Listening comes first: from here the netstack completes the daemon's connects and holds
	// its first request (the readiness check) in the socket, instead of refusing them until the
	// agent is ready; nothing is served before the root is settled and the key read.
	ln, err := listen(host, port)
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral agent: cannot listen on %s:%d: %v\n", host, port, err)
		os.Exit(1)
	}
	startStep("listen")
	// Before any goroutine of the agent's own: the capability drop and the CPU affinity are
	// made on every thread at once (a stop and a signal per thread), so fewer threads, less work.
	settleRoot()
	startStep("root")
	becomeSubreaper()
	go guardInitSignals()
	key := readBootKey()
	startStep("key")
	agent := newAgent(os.Environ(), key)
	agent.start()
	startStep("agent")
	keyed := ""
	if key == "" {
		keyed = " WITHOUT A KEY (it will answer nothing)"
	}
	reportStart()
	fmt.Fprintf(os.Stderr, "corral agent %s (go) listening on %s:%d%s\n", protocolVersion, host, port, keyed)
	serve(ln, agent)
}
