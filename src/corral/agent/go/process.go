package main

// One process started through the agent: its event log, its followers and its exit.
//
// seq 0 is "start" (never stored); output chunks follow; "exit" comes last, once every output
// pipe reached EOF and the process was reaped. The log keeps the last retainBytes of output.
// While a follower is attached and has not yet taken the oldest chunk, the pipe reader waits for
// it (up to followerStall) instead of dropping, so a live stream is lossless; with nobody
// attached, old chunks are dropped and later reported as "truncated". Invariants (under mu):
// retained events have the contiguous seqs firstSeq..nextSeq-1; exitSeq is set once (when
// openPipes is 0 and reaped) and is the last seq given out. changed is closed (and replaced) on
// every change, which is how waiters wait with a deadline.

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	retainBytes   = 16 * 1024 * 1024
	batchBytes    = 1024 * 1024
	followerStall = 30 * time.Second
	dropIndexMax  = 4096
)

type event struct {
	seq  int64
	kind string
	data []byte
}

type follower struct {
	cursor   int64
	blocking bool
}

type Process struct {
	mu      sync.Mutex
	changed chan struct{}

	pid       int
	order     int64
	cmd       []string
	tag       json.RawMessage
	cost      int
	startedAt float64
	endedAt   *float64

	events       []event
	firstSeq     int64
	nextSeq      int64
	retained     int
	droppedTotal int64
	dropSeqs     []int64
	dropTotals   []int64
	followers    map[int]*follower
	openPipes    int
	reaped       bool
	exitCode     *int
	signal       *int
	timedOut     bool
	exitSeq      int64 // -1 until the exit event exists

	restartSpec  object
	restartDelay time.Duration
	stopped      bool
	winsize      *[2]int

	stdinMu  sync.Mutex
	stdin    *os.File // nil: /dev/null, or closed
	hadStdin bool
	master   *os.File // a PTY process's terminal (for resize)
}

var (
	followerMu  sync.Mutex
	followerSeq int
)

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func newProcess(pid int, cmd []string, tag json.RawMessage) *Process {
	return &Process{
		changed:      make(chan struct{}),
		pid:          pid,
		cmd:          cmd,
		tag:          tag,
		startedAt:    nowSeconds(),
		firstSeq:     1,
		nextSeq:      1,
		followers:    map[int]*follower{},
		openPipes:    2,
		exitSeq:      -1,
		restartDelay: 250 * time.Millisecond,
	}
}

// notify wakes every waiter; under mu.
func (p *Process) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait releases mu until something changes, the timeout runs out (0: none) or done is closed;
// false when done was closed.
func (p *Process) wait(timeout time.Duration, done <-chan struct{}) bool {
	ch := p.changed
	p.mu.Unlock()
	defer p.mu.Lock()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ch:
	case <-timer:
	case <-done:
		return false
	}
	return true
}

// appendOutput is called by a pipe reader; it may wait for a lagging follower (backpressure).
func (p *Process) appendOutput(kind string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var deadline time.Time
	for len(p.events) > 0 && p.retained+len(data) > retainBytes {
		oldest := p.events[0].seq
		var behind []*follower
		for _, f := range p.followers {
			if f.blocking && f.cursor < oldest {
				behind = append(behind, f)
			}
		}
		if len(behind) > 0 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(followerStall)
			}
			if now.Before(deadline) {
				p.wait(deadline.Sub(now), nil)
				continue
			}
			for _, f := range behind {
				f.blocking = false
			}
		}
		p.dropOldest()
	}
	p.events = append(p.events, event{p.nextSeq, kind, data})
	p.nextSeq++
	p.retained += len(data)
	p.notify()
}

// addNote appends a line of the agent's own (the OOM killer's), never waiting for followers.
func (p *Process) addNote(kind string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitSeq >= 0 {
		return
	}
	for len(p.events) > 0 && p.retained+len(data) > retainBytes {
		p.dropOldest()
	}
	p.events = append(p.events, event{p.nextSeq, kind, data})
	p.nextSeq++
	p.retained += len(data)
	p.notify()
}

func (p *Process) dropOldest() {
	e := p.events[0]
	p.events[0] = event{}
	p.events = p.events[1:]
	p.retained -= len(e.data)
	p.droppedTotal += int64(len(e.data))
	p.firstSeq = e.seq + 1
	p.dropSeqs = append(p.dropSeqs, e.seq)
	p.dropTotals = append(p.dropTotals, p.droppedTotal)
	if len(p.dropSeqs) >= dropIndexMax {
		p.dropSeqs = thin(p.dropSeqs)
		p.dropTotals = thin(p.dropTotals)
	}
}

func thin(values []int64) []int64 {
	out := make([]int64, 0, len(values)/2+1)
	for i := 1; i < len(values); i += 2 {
		out = append(out, values[i])
	}
	return out
}

func (p *Process) pipeClosed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.openPipes--
	p.finishIfDone()
}

func (p *Process) onReaped(status syscall.WaitStatus) {
	p.mu.Lock()
	p.reaped = true
	ended := nowSeconds()
	p.endedAt = &ended
	if status.Signaled() {
		s := int(status.Signal())
		p.signal = &s
	} else {
		c := status.ExitStatus()
		p.exitCode = &c
	}
	p.finishIfDone()
	p.mu.Unlock()
	if p.stdinMu.TryLock() { // a writer blocked in write sees EPIPE; forget closes it then
		p.closeStdinLocked()
		p.stdinMu.Unlock()
	}
}

func (p *Process) finishIfDone() {
	if p.exitSeq < 0 && p.reaped && p.openPipes == 0 {
		p.exitSeq = p.nextSeq
		p.nextSeq++
		p.notify()
	}
}

func (p *Process) closeStdinLocked() {
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

func (p *Process) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	p.closeStdinLocked()
}

func (p *Process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitSeq < 0
}

// forgettable: finished and followed by nobody, so the table may drop it to make room.
func (p *Process) forgettable() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitSeq >= 0 && len(p.followers) == 0
}

func (p *Process) setStopped() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// killGroup signals the process group; false if the process has already finished.
func (p *Process) killGroup(signum int, timedOut bool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitSeq >= 0 {
		return false, nil
	}
	if timedOut {
		p.timedOut = true
	}
	if err := syscall.Kill(-p.pid, syscall.Signal(signum)); err != nil && err != syscall.ESRCH {
		return true, err
	}
	return true, nil
}

func (p *Process) attach(after int64) int {
	followerMu.Lock()
	followerSeq++
	fid := followerSeq
	followerMu.Unlock()
	p.mu.Lock()
	p.followers[fid] = &follower{after, true}
	p.mu.Unlock()
	return fid
}

func (p *Process) detach(fid int) {
	p.mu.Lock()
	delete(p.followers, fid)
	p.notify()
	p.mu.Unlock()
}

func (p *Process) snapshotEnd() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitSeq >= 0 {
		return p.exitSeq
	}
	return p.nextSeq - 1
}

// nextBatch takes the encoded events after cursor (up to end; end -2: waiting for more).
// Returns (data, new cursor, finished, ok); ok is false when done was closed while waiting.
func (p *Process) nextBatch(fid int, cursor, end int64, done <-chan struct{}) ([]byte, int64, bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var data []byte
	var newCursor int64
	finished := false
	for {
		data, newCursor = p.take(cursor, end)
		last := end
		if end == -2 {
			last = p.exitSeq
		}
		finished = last >= 0 && newCursor >= last || end != -2 && newCursor >= end
		if len(data) > 0 || finished || end != -2 {
			break
		}
		if !p.wait(0, done) {
			return nil, cursor, false, false
		}
	}
	if f := p.followers[fid]; f != nil {
		f.cursor = newCursor
	}
	p.notify()
	return data, newCursor, finished, true
}

func appendLine(buf []byte, v any) []byte {
	return append(append(buf, marshal(v)...), '\n')
}

func (p *Process) take(cursor, end int64) ([]byte, int64) {
	var buf []byte
	limit := end
	if end == -2 {
		limit = 1<<62 - 1
	}
	if cursor < 0 && limit >= 0 {
		buf = appendLine(buf, struct {
			Seq  int    `json:"seq"`
			Type string `json:"type"`
			Pid  int    `json:"pid"`
		}{0, "start", p.pid})
		cursor = 0
	}
	if cursor < p.firstSeq-1 && cursor < limit {
		lastDropped := p.firstSeq - 1
		buf = appendLine(buf, struct {
			Seq     int64  `json:"seq"`
			Type    string `json:"type"`
			Dropped int64  `json:"dropped_bytes"`
		}{lastDropped, "truncated", p.droppedAfter(cursor)})
		cursor = lastDropped
	}
	size := 0
	start := cursor + 1 - p.firstSeq
	if start < 0 {
		start = 0
	}
	for i := start; i < int64(len(p.events)); i++ {
		e := p.events[i]
		if e.seq > limit || size >= batchBytes {
			break
		}
		buf = append(buf, `{"seq":`...)
		buf = strconv.AppendInt(buf, e.seq, 10)
		buf = append(buf, `,"type":"`...)
		buf = append(buf, e.kind...)
		buf = append(buf, `","data":"`...)
		buf = base64.StdEncoding.AppendEncode(buf, e.data)
		buf = append(buf, "\"}\n"...)
		size += len(e.data)
		cursor = e.seq
	}
	if p.exitSeq >= 0 && cursor == p.exitSeq-1 && p.exitSeq <= limit {
		buf = appendLine(buf, struct {
			Seq      int64  `json:"seq"`
			Type     string `json:"type"`
			ExitCode *int   `json:"exit_code"`
			Signal   *int   `json:"signal"`
			TimedOut bool   `json:"timed_out"`
		}{p.exitSeq, "exit", p.exitCode, p.signal, p.timedOut})
		cursor = p.exitSeq
	}
	return buf, cursor
}

// droppedAfter: bytes of dropped chunks with seq > cursor (exact until the index was thinned).
func (p *Process) droppedAfter(cursor int64) int64 {
	i := sort.Search(len(p.dropSeqs), func(i int) bool { return p.dropSeqs[i] > cursor }) - 1
	if i >= 0 {
		return p.droppedTotal - p.dropTotals[i]
	}
	return p.droppedTotal
}

func (p *Process) describe() map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	tag := p.tag
	if tag == nil {
		tag = json.RawMessage("null")
	}
	d := map[string]any{
		"pid":        p.pid,
		"cmd":        p.cmd,
		"tag":        tag,
		"running":    p.exitSeq < 0,
		"exit_code":  p.exitCode,
		"signal":     p.signal,
		"started_at": p.startedAt,
		"ended_at":   p.endedAt,
	}
	if p.winsize != nil {
		d["pty"] = true
		d["rows"] = p.winsize[0]
		d["cols"] = p.winsize[1]
	}
	return d
}
