package main

// Giving memory back once the agent goes quiet. The Go runtime keeps the heap it grew during a
// burst of requests (its goal is at least 4 MiB before the first collection) and hands free
// pages back to the kernel only slowly; inside gVisor those pages stay in the sentry's memory
// file, host memory that an idle sandbox keeps. So a quiet spell after any request runs one
// collection and returns every free page (debug.FreeOSMemory). One timer, re-armed by every
// request's start and end: nothing runs while the agent is idle for good, and nothing on the
// request path but the re-arming.
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
	"sync"
	"time"
)

const (
	quietBeforeTrim = 2 * time.Second
	// A spell ending later than this past its time is taken for one a checkpoint cut short.
	trimLateness = 250 * time.Millisecond
)

type memoryTrim struct {
	mu      sync.Mutex
	timer   *time.Timer
	armedAt time.Time // when the pending spell started (with its monotonic reading)
	resumed bool      // the pending spell is one restarted after a late end
	free    func()    // what a spell's end runs: debug.FreeOSMemory (nil), or a test's
}

// touch (re)starts the quiet spell after which free memory goes back to the kernel.
func (t *memoryTrim) touch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armedAt = time.Now()
	t.resumed = false
	if t.timer == nil {
		t.timer = time.AfterFunc(quietBeforeTrim, t.fire)
		return
	}
	t.timer.Reset(quietBeforeTrim)
}

func (t *memoryTrim) fire() {
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
	free := t.free
	t.mu.Unlock()
	if free == nil {
		free = debug.FreeOSMemory
	}
	free()
}
