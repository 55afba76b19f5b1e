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
// request's allocations and goroutine stacks use, and gVisor faults each back in on the first
// call after the quiet spell; a ready pool's sandbox (one exec since its start) and a sandbox
// between short commands have little to give back (the agent on the host: 50 execs of
// `echo hi` grow it by about 0.9 MiB, of which a trim returned 0.4), while a burst of output
// (megabytes in the process log) still goes back. What the faults cost was not measured apart
// from the spread between sandboxes: the figures first quoted for it (55fa3ff) came from an
// A/B whose two sandboxes ran the same build.
//
// Across a checkpoint: gVisor moves the monotonic clock on by the time a sandbox spent saved,
// so a quiet spell pending when a sandbox was checkpointed (a warm template's image is taken
// right after its warmup's last request) ends the moment it is restored, and the collection,
// its stops of the world and the faults of the restored heap it touches, fell on the first
// requests of every sandbox restored from the image (a forced collection of 7+27+2 ms of clock
// beside the restore's rekey, seen with GODEBUG=gctrace=1). A spell that ends much later than
// it should have was cut short that way (or by a starved host): it starts over instead, once.

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

const (
	quietBeforeTrim = 2 * time.Second
	trimAbove       = 1 * mib
	// A spell ending later than this past its time is taken for one a checkpoint cut short.
	trimLateness = 250 * time.Millisecond
)

type memoryTrim struct {
	mu      sync.Mutex
	timer   *time.Timer
	base    uint64    // what the runtime held after the last trim, or at the first request
	armedAt time.Time // when the pending spell started (with its monotonic reading)
	resumed bool      // the pending spell is one restarted after a late end
	ended   func()    // a test's stand-in for what a spell's end does (nil: trimIfGrown)
}

// touch (re)starts the quiet spell after which free memory goes back to the kernel.
func (t *memoryTrim) touch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armedAt = time.Now()
	t.resumed = false
	if t.timer == nil {
		t.base = heldBytes()
		t.timer = time.AfterFunc(quietBeforeTrim, t.quiet)
		return
	}
	t.timer.Reset(quietBeforeTrim)
}

// quiet runs at the end of a quiet spell: a trim when the runtime grew by trimAbove or more,
// unless the spell was re-armed meanwhile or ended late (then it starts over, once).
func (t *memoryTrim) quiet() {
	t.mu.Lock()
	elapsed := time.Since(t.armedAt)
	if elapsed < quietBeforeTrim { // a request re-armed the timer as it fired
		t.mu.Unlock()
		return
	}
	if elapsed-quietBeforeTrim > trimLateness && !t.resumed {
		t.armedAt = time.Now()
		t.resumed = true
		t.timer.Reset(quietBeforeTrim)
		t.mu.Unlock()
		return
	}
	ended := t.ended
	t.mu.Unlock()
	if ended != nil {
		ended()
		return
	}
	t.trimIfGrown()
}

func (t *memoryTrim) trimIfGrown() {
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
