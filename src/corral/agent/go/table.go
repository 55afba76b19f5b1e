package main

// The process table (Agent): its keys and environment, the reaper, restarts, lookups and room.
// Spawning is in spawn.go (reading the request: spawnspec.go; starting the child: child.go).
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
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	defaultPath     = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	pipeRead        = 64 * 1024
	pipeFirstRead   = 4 * 1024
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
