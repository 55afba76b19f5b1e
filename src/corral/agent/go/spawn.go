package main

// Spawning a process into the table (Agent.spawn) and the readers of its output pipes.

import (
	"encoding/json"
	"os"
	"syscall"
	"time"
)

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

// pump reads one output pipe to its end into the process's log. Each chunk is logged as a copy
// of its own size, out of one read buffer per pipe: a chunk no longer pins a 64 KiB array for
// as long as the log keeps it (a line-by-line writer held 64 KiB per line), and a short
// command's exec allocates 4 KiB per pipe instead of 64 (a large object, zeroed, whose pages
// gVisor faults in afresh after the quiet trim gave them back). The buffer grows to pipeRead
// once a read fills it.
func pump(p *Process, f *os.File, kind string) {
	defer func() {
		f.Close()
		p.pipeClosed()
	}()
	buf := make([]byte, pipeFirstRead)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.appendOutput(kind, append([]byte(nil), buf[:n]...))
			if n == len(buf) && len(buf) < pipeRead {
				buf = make([]byte, pipeRead)
			}
		}
		if err != nil {
			return
		}
	}
}
