package main

// Giving memory back once the agent goes quiet. The Go runtime keeps the heap it grew during a
// burst of requests (its goal is at least 4 MiB before the first collection) and hands free
// pages back to the kernel only slowly; inside gVisor those pages stay in the sentry's memory
// file, host memory that an idle sandbox keeps. So a quiet spell after any request runs one
// collection and returns every free page (debug.FreeOSMemory). One timer, re-armed by every
// request's start and end: nothing runs while the agent is idle for good, and nothing on the
// request path but the re-arming.
//
// Only when there is something to give back: the runtime then holds at least trimAbove more
// than it did after the last trim (or at the first request). A trim returns the pages the next
// request's allocations and goroutine stacks use, and gVisor faults each back in, which the
// first call after the quiet spell paid for (an exec of `echo hi` after 3 s quiet: +2.7 ms of
// the sandbox's CPU, +3.3 ms wall, against the same agent without the trim). A ready pool's
// sandbox (one exec since its start) and a sandbox between short commands no longer pay it;
// a burst of output (megabytes in the process log) still goes back.

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

const (
	quietBeforeTrim = 2 * time.Second
	trimAbove       = 1 * mib
)

type memoryTrim struct {
	mu    sync.Mutex
	timer *time.Timer
	base  uint64 // what the runtime held after the last trim, or at the first request
}

// touch (re)starts the quiet spell after which free memory goes back to the kernel.
func (t *memoryTrim) touch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		t.base = heldBytes()
		t.timer = time.AfterFunc(quietBeforeTrim, t.quiet)
		return
	}
	t.timer.Reset(quietBeforeTrim)
}

// quiet runs at the end of a quiet spell: a trim when the runtime grew by trimAbove or more.
func (t *memoryTrim) quiet() {
	t.mu.Lock()
	base := t.base
	t.mu.Unlock()
	if heldBytes() < base+trimAbove {
		return
	}
	debug.FreeOSMemory()
	held := heldBytes()
	t.mu.Lock()
	t.base = held
	t.mu.Unlock()
}

var heldMetrics = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

// heldBytes is the memory the Go runtime holds from the kernel: all it mapped, less the heap
// pages it gave back.
func heldBytes() uint64 {
	samples := make([]metrics.Sample, len(heldMetrics))
	for i, name := range heldMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	total, released := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	if released > total {
		return 0
	}
	return total - released
}
