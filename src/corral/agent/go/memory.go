package main

// Giving memory back once the agent goes quiet. The Go runtime keeps the heap it grew during a
// burst of requests (its goal is at least 4 MiB before the first collection) and hands free
// pages back to the kernel only slowly; inside gVisor those pages stay in the sentry's memory
// file, host memory that an idle sandbox keeps. So a quiet spell after any request runs one
// collection and returns every free page (debug.FreeOSMemory). One timer, re-armed by every
// request's start and end: nothing runs while the agent is idle for good, and nothing on the
// request path but the re-arming.

import (
	"runtime/debug"
	"sync"
	"time"
)

const quietBeforeTrim = 2 * time.Second

type memoryTrim struct {
	mu    sync.Mutex
	timer *time.Timer
}

// touch (re)starts the quiet spell after which free memory goes back to the kernel.
func (t *memoryTrim) touch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		t.timer = time.AfterFunc(quietBeforeTrim, debug.FreeOSMemory)
		return
	}
	t.timer.Reset(quietBeforeTrim)
}
