package main

// The process table (Agent): spawning, the reaper, pipe readers, timeouts, restarts, signals.
//
// The reaper is the only caller of wait4 in the agent: as PID 1 (or a child subreaper) every
// orphan in the sandbox becomes its child, so it waits for -1 and matches the pid against the
// table; unknown pids are orphans and are simply reaped. Agent.mu guards the table and is held
// across the fork so the reaper, which looks a reaped pid up under it, matches a child that
// exits before it was registered. Lock order: Agent.mu before Process.mu; Process.stdinMu is
// never taken while holding either.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const (
	defaultPath     = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	pipeRead        = 64 * 1024
	orphanPoll      = time.Second
	maxProcesses    = 1024
	maxTagBytes     = 4096
	maxCmdBytes     = 256 * 1024
	maxTableBytes   = 8 * 1024 * 1024
	maxPtySide      = 4096
	restartDelay    = 500 * time.Millisecond
	restartDelayMax = 30 * time.Second
	restartStable   = 10 * time.Second
)

type Agent struct {
	mu         sync.Mutex
	key        string
	bootID     string
	processes  map[int]*Process
	order      int64
	tableBytes int
	defaultEnv map[string]string
	spawnGen   int64
	reaperWake chan struct{}
	watches    *Watches
	conns      *connTable
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func envMap(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func cleanEnv(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if !strings.HasPrefix(k, envPrefix) {
			out[k] = v
		}
	}
	if _, ok := out["PATH"]; !ok {
		out["PATH"] = defaultPath
	}
	if _, ok := out["HOME"]; !ok {
		out["HOME"] = "/root"
	}
	return out
}

func newAgent(environ []string, key string) *Agent {
	return &Agent{
		key:        key,
		bootID:     randomHex(16),
		processes:  map[int]*Process{},
		defaultEnv: cleanEnv(envMap(environ)),
		reaperWake: make(chan struct{}, 1),
		watches:    newWatches(),
		conns:      newConnTable(),
	}
}

func (a *Agent) getKey() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.key
}

func (a *Agent) getBootID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bootID
}

// rekey takes a new key and boot id after a restore. The agent keeps no generator state of its
// own (crypto/rand reads the kernel on every call), so there is nothing more to reseed.
func (a *Agent) rekey(key, bootID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.key = key
	a.bootID = bootID
}

func (a *Agent) setEnv(env map[string]string, merge bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if merge {
		merged := map[string]string{}
		for k, v := range a.defaultEnv {
			merged[k] = v
		}
		for k, v := range env {
			merged[k] = v
		}
		env = merged
	}
	a.defaultEnv = cleanEnv(env)
}

func (a *Agent) start() {
	go a.reapForever()
	startOomKiller(a.onOomKill)
}

func (a *Agent) onOomKill(chain []int, resident uint64, name string, total uint64) {
	note := fmt.Sprintf("corral: out of memory: killed process %d (%s) using %d MiB; the sandbox has %d MiB (create it with more memory)\n",
		chain[0], name, resident/mib, total/mib)
	fmt.Fprint(os.Stderr, note)
	a.mu.Lock()
	var started *Process
	for _, pid := range chain {
		if p, ok := a.processes[pid]; ok {
			started = p
			break
		}
	}
	a.mu.Unlock()
	if started != nil {
		started.addNote("stderr", []byte(note))
	}
}

func (a *Agent) reapForever() {
	for {
		a.mu.Lock()
		gen := a.spawnGen
		a.mu.Unlock()
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			a.mu.Lock()
			again := a.spawnGen != gen
			a.mu.Unlock()
			if !again {
				select {
				case <-a.reaperWake:
				case <-time.After(orphanPoll):
				}
			}
			continue
		}
		a.mu.Lock()
		p := a.processes[pid]
		a.mu.Unlock()
		if p == nil {
			continue
		}
		p.mu.Lock()
		already := p.reaped
		p.mu.Unlock()
		if already {
			continue
		}
		p.onReaped(status)
		p.mu.Lock()
		restart := p.restartSpec != nil && !p.stopped
		p.mu.Unlock()
		if restart {
			a.scheduleRestart(p)
		}
	}
}

func (a *Agent) scheduleRestart(p *Process) {
	p.mu.Lock()
	ended := nowSeconds()
	if p.endedAt != nil {
		ended = *p.endedAt
	}
	ran := time.Duration((ended - p.startedAt) * float64(time.Second))
	delay := restartDelay
	if ran < restartStable {
		delay = p.restartDelay * 2
		if delay > restartDelayMax {
			delay = restartDelayMax
		}
	}
	p.mu.Unlock()
	time.AfterFunc(delay, func() { a.restart(p, delay) })
}

func (a *Agent) restart(p *Process, delay time.Duration) {
	logf("restarting %s (it exited)", repr(p.cmd[0]))
	fresh, _, err := a.spawn(p.restartSpec, false)
	if err != nil {
		logf("cannot restart %s: %v", repr(p.cmd[0]), err)
		p.mu.Lock()
		p.restartDelay = delay
		now := nowSeconds()
		p.endedAt = &now
		p.mu.Unlock()
		a.scheduleRestart(p)
		return
	}
	fresh.mu.Lock()
	fresh.restartDelay = delay
	fresh.mu.Unlock()
}

func (a *Agent) get(pid int) (*Process, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.processes[pid]
	if p == nil {
		return nil, newError(404, "not_found", "no process with pid %d", pid)
	}
	return p, nil
}

func (a *Agent) allProcesses() []*Process {
	a.mu.Lock()
	list := make([]*Process, 0, len(a.processes))
	for _, p := range a.processes {
		list = append(list, p)
	}
	a.mu.Unlock()
	sortProcesses(list)
	return list
}

func sortProcesses(list []*Process) {
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && (list[j].startedAt < list[j-1].startedAt ||
			list[j].startedAt == list[j-1].startedAt && list[j].order < list[j-1].order); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

func (a *Agent) forget(pid int) error {
	a.mu.Lock()
	p := a.processes[pid]
	if p == nil {
		a.mu.Unlock()
		return newError(404, "not_found", "no process with pid %d", pid)
	}
	if p.running() {
		a.mu.Unlock()
		return newError(409, "conflict", "process %d is still running", pid)
	}
	a.remove(p)
	a.mu.Unlock()
	p.closeStdin()
	return nil
}

// forgetDelivered drops p after its stream delivered the exit event (forget=true), if it is
// still the table's entry for its pid; there is nothing to answer, so nothing to report.
func (a *Agent) forgetDelivered(p *Process) {
	if p.running() {
		return
	}
	a.mu.Lock()
	a.remove(p)
	a.mu.Unlock()
	p.closeStdin()
}

func (a *Agent) remove(p *Process) {
	if a.processes[p.pid] == p {
		delete(a.processes, p.pid)
		a.tableBytes -= p.cost
	}
}

func (a *Agent) makeRoom(cost int, program string) ([]*Process, error) {
	var forgotten []*Process
	for len(a.processes) >= maxProcesses || a.tableBytes+cost > maxTableBytes {
		var victim *Process
		for _, p := range a.processes {
			if (victim == nil || p.order < victim.order) && p.forgettable() {
				victim = p
			}
		}
		if victim == nil {
			return forgotten, newError(413, "too_large",
				"cannot start %s: the sandbox's agent already tracks %d running or followed processes "+
					"(at most %d, with %d KiB of commands and tags); wait for some to finish, or kill some",
				repr(program), len(a.processes), maxProcesses, maxTableBytes/1024)
		}
		a.remove(victim)
		forgotten = append(forgotten, victim)
	}
	return forgotten, nil
}

func parseWinsize(raw json.RawMessage) (int, int, error) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return 0, 0, badRequest(`'pty' must be an object {"rows": R, "cols": C}`)
	}
	sides := [2]int{24, 80}
	for i, name := range []string{"rows", "cols"} {
		v, present := m[name]
		if !present {
			continue
		}
		n, ok := jsonInt(v)
		if !ok || n < 1 || n > maxPtySide {
			return 0, 0, badRequest("'pty.%s' must be an integer from 1 to %d", name, maxPtySide)
		}
		sides[i] = int(n)
	}
	return sides[0], sides[1], nil
}

var signalNames = map[string]int{
	"SIGABRT": 6, "SIGALRM": 14, "SIGBUS": 7, "SIGCHLD": 17, "SIGCLD": 17, "SIGCONT": 18,
	"SIGFPE": 8, "SIGHUP": 1, "SIGILL": 4, "SIGINT": 2, "SIGIO": 29, "SIGIOT": 6, "SIGKILL": 9,
	"SIGPIPE": 13, "SIGPOLL": 29, "SIGPROF": 27, "SIGPWR": 30, "SIGQUIT": 3, "SIGRTMAX": 64,
	"SIGRTMIN": 34, "SIGSEGV": 11, "SIGSTKFLT": 16, "SIGSTOP": 19, "SIGSYS": 31, "SIGTERM": 15,
	"SIGTRAP": 5, "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22, "SIGURG": 23, "SIGUSR1": 10,
	"SIGUSR2": 12, "SIGVTALRM": 26, "SIGWINCH": 28, "SIGXCPU": 24, "SIGXFSZ": 25,
}

func parseSignal(raw json.RawMessage) (int, error) {
	if n, ok := jsonInt(raw); ok {
		return int(n), nil
	}
	if s, ok := jsonString(raw); ok {
		name := strings.ToUpper(strings.TrimSpace(s))
		if name != "" && strings.Trim(name, "0123456789") == "" {
			n, err := strconv.Atoi(name)
			if err == nil {
				return n, nil
			}
		}
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
		if n, ok := signalNames[name]; ok {
			return n, nil
		}
	}
	return 0, badRequest("unknown signal %s", pyValue(raw))
}

// pyValue renders a JSON value roughly as Python's repr, for messages.
func pyValue(raw json.RawMessage) string {
	if s, ok := jsonString(raw); ok {
		return repr(s)
	}
	if isNull(raw) {
		return "None"
	}
	switch string(raw) {
	case "true":
		return "True"
	case "false":
		return "False"
	}
	return string(raw)
}

func compactSize(raw json.RawMessage, what string, limit int) (int, error) {
	size := 4 // null
	if raw != nil {
		size = len(marshal(decodeAny(raw)))
	}
	if size > limit {
		return 0, newError(413, "too_large", "%s is %d bytes as JSON; at most %d bytes are kept", what, size, limit)
	}
	return size, nil
}

func defaultShell() []string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return []string{"/bin/bash", "-l"}
	}
	return []string{"/bin/sh", "-l"}
}

// findProgram is the file program names, searched on the child's PATH as execvpe does.
func findProgram(program string, env map[string]string) (string, error) {
	if strings.Contains(program, "/") {
		return program, nil
	}
	pathVar, ok := env["PATH"]
	if !ok {
		pathVar = "/bin:/usr/bin"
	}
	denied := false
	for _, dir := range strings.Split(pathVar, ":") {
		candidate := path.Join(dir, program)
		if dir == "" {
			candidate = program
		}
		st, err := os.Stat(candidate)
		if err != nil {
			continue
		}
		if st.Mode().IsRegular() && syscall.Access(candidate, 1) == nil {
			return candidate, nil
		}
		denied = true
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", syscall.ENOENT
}

type credentials struct {
	cred *syscall.Credential
}

func lookupUser(raw json.RawMessage, program string, env map[string]string) (*syscall.Credential, error) {
	var u *user.User
	var err error
	if n, ok := jsonInt(raw); ok {
		u, err = user.LookupId(strconv.FormatInt(n, 10))
		if err != nil {
			return &syscall.Credential{Uid: uint32(n), Gid: uint32(n), Groups: []uint32{}}, nil
		}
	} else if s, ok := jsonString(raw); ok {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			u, err = user.LookupId(s)
			if err != nil {
				n, _ := strconv.ParseUint(s, 10, 32)
				return &syscall.Credential{Uid: uint32(n), Gid: uint32(n), Groups: []uint32{}}, nil
			}
		} else if u, err = user.Lookup(s); err != nil {
			return nil, newError(400, "exec_failed", "cannot execute %s: unknown user %s", repr(program), repr(s))
		}
	} else {
		return nil, badRequest("'user' must be a user name or uid")
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	env["HOME"] = u.HomeDir
	env["USER"] = u.Username
	env["LOGNAME"] = u.Username
	groups := []uint32{}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// spawn starts a process described by a POST /processes body; attaches a follower if asked.
func (a *Agent) spawn(spec object, follow bool) (*Process, int, error) {
	cmdRaw, shellRaw := spec["cmd"], spec["shell"]
	ptyRaw := spec["pty"]
	var argv []string
	rows, cols, isPty := 0, 0, !isNull(ptyRaw)
	if isPty {
		var err error
		if rows, cols, err = parseWinsize(ptyRaw); err != nil {
			return nil, 0, err
		}
	}
	var defaultCmd []string
	if isPty && isNull(cmdRaw) && isNull(shellRaw) {
		defaultCmd = defaultShell()
	}
	if (isNull(cmdRaw) && defaultCmd == nil) == isNull(shellRaw) {
		return nil, 0, badRequest("exactly one of 'cmd' and 'shell' is required")
	}
	var costValue json.RawMessage
	if !isNull(shellRaw) {
		shell, ok := jsonString(shellRaw)
		if !ok {
			return nil, 0, badRequest("'shell' must be a string")
		}
		argv = []string{"/bin/sh", "-c", shell}
		costValue = shellRaw
	} else if defaultCmd != nil {
		argv = defaultCmd
		costValue = marshal(argv)
	} else {
		var items []json.RawMessage
		if json.Unmarshal(cmdRaw, &items) != nil || len(items) == 0 {
			return nil, 0, badRequest("'cmd' must be a non-empty list of strings")
		}
		for _, item := range items {
			s, ok := jsonString(item)
			if !ok {
				return nil, 0, badRequest("'cmd' must be a non-empty list of strings")
			}
			argv = append(argv, s)
		}
		costValue = cmdRaw
	}
	var tag json.RawMessage
	if !isNull(spec["tag"]) {
		tag = marshal(decodeAny(spec["tag"]))
	}
	cost, err := compactSize(costValue, "'cmd'", maxCmdBytes)
	if err != nil {
		return nil, 0, err
	}
	tagCost, err := compactSize(tag, "'tag'", maxTagBytes)
	if err != nil {
		return nil, 0, err
	}
	cost += tagCost
	extraEnv, err := jsonStrDict(spec["env"], "env")
	if err != nil {
		return nil, 0, err
	}
	var timeout float64
	if !isNull(spec["timeout"]) {
		n, ok := decodeAny(spec["timeout"]).(json.Number)
		f, ferr := n.Float64()
		if !ok || ferr != nil || f <= 0 {
			return nil, 0, badRequest("'timeout' must be a positive number of seconds or null")
		}
		timeout = f
	}
	cwd := "/"
	if !isNull(spec["cwd"]) {
		if cwd, err = resolveJSONPath(spec["cwd"]); err != nil {
			return nil, 0, err
		}
	}
	program := argv[0]
	a.mu.Lock()
	env := map[string]string{}
	for k, v := range a.defaultEnv {
		env[k] = v
	}
	a.mu.Unlock()
	var cred *syscall.Credential
	if !isNull(spec["user"]) {
		if cred, err = lookupUser(spec["user"], program, env); err != nil {
			return nil, 0, err
		}
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	if isPty {
		if _, ok := env["TERM"]; !ok {
			env["TERM"] = "xterm-256color"
		}
	}
	withStdin := truthy(spec["stdin"]) && !isPty

	if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		if err == nil {
			err = syscall.ENOTDIR
		}
		return nil, 0, newError(400, "exec_failed", "cannot start %s in directory %s: %s", repr(program), repr(cwd), strerror(err))
	}
	file, err := findProgram(program, env)
	if err != nil {
		return nil, 0, newError(400, "exec_failed", "cannot execute %s: %s", repr(program), strerror(err))
	}

	a.mu.Lock()
	forgotten, err := a.makeRoom(cost, program)
	if err != nil {
		a.mu.Unlock()
		for _, old := range forgotten {
			old.closeStdin()
		}
		return nil, 0, err
	}
	var started *child
	if isPty {
		started, err = startPty(file, argv, envList(env), cwd, cred, rows, cols)
	} else {
		started, err = startPiped(file, argv, envList(env), cwd, cred, withStdin)
	}
	if err != nil {
		a.mu.Unlock()
		for _, old := range forgotten {
			old.closeStdin()
		}
		return nil, 0, newError(400, "exec_failed", "cannot execute %s: %s", repr(program), strerror(err))
	}
	p := newProcess(started.pid, argv, tag)
	a.order++
	p.order = a.order
	p.cost = cost
	p.stdin = started.stdin
	p.hadStdin = started.stdin != nil
	p.master = started.master
	if truthy(spec["restart"]) {
		p.restartSpec = spec
	}
	if isPty {
		p.winsize = &[2]int{rows, cols}
		p.openPipes = 1
	}
	if twin := a.processes[p.pid]; twin != nil {
		a.remove(twin)
		forgotten = append(forgotten, twin)
	}
	a.processes[p.pid] = p
	a.tableBytes += cost
	fid := 0
	if follow {
		fid = p.attach(-1)
	}
	a.spawnGen++
	select {
	case a.reaperWake <- struct{}{}:
	default:
	}
	a.mu.Unlock()
	for _, old := range forgotten {
		old.closeStdin()
	}
	go pump(p, started.stdout, "stdout")
	if started.stderr != nil {
		go pump(p, started.stderr, "stderr")
	}
	if timeout > 0 {
		time.AfterFunc(time.Duration(timeout*float64(time.Second)), func() {
			_, _ = p.killGroup(int(syscall.SIGKILL), true)
		})
	}
	return p, fid, nil
}

func pump(p *Process, f *os.File, kind string) {
	defer func() {
		f.Close()
		p.pipeClosed()
	}()
	for {
		buf := make([]byte, pipeRead)
		n, err := f.Read(buf)
		if n > 0 {
			p.appendOutput(kind, buf[:n:n])
		}
		if err != nil {
			return
		}
	}
}

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

var _ = credentials{}
