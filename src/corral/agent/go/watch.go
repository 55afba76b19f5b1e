package main

// Directory watches: inotify turned into events {"name", "type", "dir"} (see
// src/corral/agent/watch.py, whose behaviour this follows: fsnotify's mapping, the agent's own
// upload temporaries hidden and their rename reported as create + write, recursive watches that
// follow new directories). Bounds: maxWatches per agent, maxDirs per watch, maxEvents queued.
//
// Each watch's reader waits in ppoll(2) on its inotify fd and a wake pipe (closed to stop it),
// as the Python agent's select does, never in the runtime's poller: listener.go says why (a
// registration made before a checkpoint may never be reported after the restore).

import (
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const (
	maxWatches = 64
	maxDirs    = 4096
	maxEvents  = 4096
	maxWait    = 60 * time.Second
	uploadMark = ".corral-upload-"
	watched    = syscall.IN_MODIFY | syscall.IN_ATTRIB | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO |
		syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_DELETE_SELF
)

var kinds = []struct {
	bits uint32
	name string
}{
	{syscall.IN_CREATE | syscall.IN_MOVED_TO, "create"},
	{syscall.IN_MODIFY, "write"},
	{syscall.IN_DELETE, "remove"},
	{syscall.IN_MOVED_FROM, "rename"},
	{syscall.IN_ATTRIB, "chmod"},
}

type watchEvent struct {
	Name fsPath `json:"name"`
	Type string `json:"type"`
	Dir  bool   `json:"dir"`
}

type Watch struct {
	id        int
	root      string
	recursive bool
	mu        sync.Mutex
	changed   chan struct{}
	events    []watchEvent
	dropped   int
	closed    bool
	fd        int // the inotify instance (non-blocking); only the reader reads and closes it
	wakeR     int // the wake pipe: remove closes wakeW, the reader then stops
	wakeW     int
	dirs      map[int]string
	cookies   []uint32
}

type Watches struct {
	mu    sync.Mutex
	table map[int]*Watch
	next  int
}

func newWatches() *Watches { return &Watches{table: map[int]*Watch{}} }

func (ws *Watches) create(p string, recursive bool) (*Watch, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.table) >= maxWatches {
		return nil, newError(409, "conflict", "at most %d watches at once: remove one first", maxWatches)
	}
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, newError(409, "conflict", "cannot watch %s: inotify: %s", p, strerror(err))
	}
	w := &Watch{id: ws.next + 1, root: p, recursive: recursive, changed: make(chan struct{}), fd: fd, dirs: map[int]string{}}
	if err := w.add(p, "", true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if recursive {
		if err := w.addBelow(p, "", nil); err != nil {
			syscall.Close(fd)
			return nil, err
		}
	}
	var wake [2]int
	if err := syscall.Pipe2(wake[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(fd)
		return nil, newError(409, "conflict", "cannot watch %s: %s", p, strerror(err))
	}
	w.wakeR, w.wakeW = wake[0], wake[1]
	ws.next++
	ws.table[w.id] = w
	go w.readForever()
	return w, nil
}

func (ws *Watches) get(id int) (*Watch, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.table[id]
	if w == nil {
		return nil, newError(404, "not_found", "no watch %d", id)
	}
	return w, nil
}

func (ws *Watches) remove(id int) error {
	ws.mu.Lock()
	w := ws.table[id]
	delete(ws.table, id)
	ws.mu.Unlock()
	if w == nil {
		return newError(404, "not_found", "no watch %d", id)
	}
	w.mu.Lock()
	w.closed = true
	w.notify()
	w.mu.Unlock()
	syscall.Close(w.wakeW) // the reader wakes, closes the inotify fd and stops
	return nil
}

func (w *Watch) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *Watch) add(p, rel string, strict bool) error {
	if len(w.dirs) >= maxDirs {
		return newError(413, "too_large", "watching %s: more than %d directories", w.root, maxDirs)
	}
	wd, err := syscall.InotifyAddWatch(w.fd, p, watched|syscall.IN_ONLYDIR)
	if err != nil {
		if !strict {
			return nil
		}
		if err == syscall.ENOTDIR {
			return badRequest("%s is not a directory", p)
		}
		if err == syscall.ENOENT {
			return newError(404, "not_found", "watching %s: %s", p, strerror(err))
		}
		return badRequest("watching %s: %s", p, strerror(err))
	}
	w.dirs[wd] = rel
	return nil
}

func (w *Watch) addBelow(p, rel string, found *[]watchEvent) error {
	names, err := readDirNames(p)
	if err != nil {
		return nil
	}
	for _, name := range names {
		inner := name
		if rel != "" {
			inner = rel + "/" + name
		}
		full := strings.TrimRight(p, "/") + "/" + name
		var st syscall.Stat_t
		isDir := syscall.Lstat(full, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR
		if found != nil {
			*found = append(*found, watchEvent{fsPath(inner), "create", isDir})
		}
		if isDir {
			if err := w.add(full, inner, false); err != nil {
				return err
			}
			if err := w.addBelow(full, inner, found); err != nil {
				return err
			}
		}
	}
	return nil
}

// readForever reads the watch's events until its root is gone, a read fails or remove wakes it.
func (w *Watch) readForever() {
	defer func() {
		syscall.Close(w.fd)
		syscall.Close(w.wakeR)
		w.mu.Lock()
		w.closed = true
		w.notify()
		w.mu.Unlock()
	}()
	buf := make([]byte, 64*1024)
	for {
		readable, woken, err := waitReadable(w.fd, w.wakeR)
		if err != nil || woken {
			return
		}
		if !readable {
			continue
		}
		n, err := syscall.Read(w.fd, buf)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 || w.handle(buf[:n]) {
			return
		}
	}
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollIn = 0x1

// waitReadable blocks in ppoll(2) until fd or wake is readable, hung up or in error, and says
// which. A plain blocking system call: a checkpoint interrupts it and the restore restarts it.
func waitReadable(fd, wake int) (readable, woken bool, err error) {
	fds := [2]pollFd{{fd: int32(fd), events: pollIn}, {fd: int32(wake), events: pollIn}}
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 2, 0, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return false, false, errno
		}
		return fds[0].revents != 0, fds[1].revents != 0, nil
	}
}

func (w *Watch) seenUpload(cookie uint32) bool {
	for i, c := range w.cookies {
		if c == cookie {
			w.cookies = append(w.cookies[:i], w.cookies[i+1:]...)
			return true
		}
	}
	return false
}

// handle turns a read of inotify events into watch events; true once the root is gone.
func (w *Watch) handle(data []byte) bool {
	var found []watchEvent
	ended := false
	dropped := 0
	for offset := 0; offset+syscall.SizeofInotifyEvent <= len(data); {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&data[offset]))
		raw := data[offset+syscall.SizeofInotifyEvent : offset+syscall.SizeofInotifyEvent+int(ev.Len)]
		offset += syscall.SizeofInotifyEvent + int(ev.Len)
		name := string(raw)
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		mask := ev.Mask
		if mask&syscall.IN_Q_OVERFLOW != 0 {
			dropped++
			continue
		}
		rel, known := w.dirs[int(ev.Wd)]
		if mask&syscall.IN_IGNORED != 0 {
			delete(w.dirs, int(ev.Wd))
			ended = ended || known && rel == ""
			continue
		}
		if !known {
			continue
		}
		if mask&syscall.IN_DELETE_SELF != 0 {
			if rel == "" {
				found = append(found, watchEvent{"", "remove", true})
			}
			continue
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		isDir := mask&syscall.IN_ISDIR != 0
		if strings.HasPrefix(name, ".") && strings.Contains(name, uploadMark) {
			if mask&syscall.IN_MOVED_FROM != 0 {
				w.cookies = append(w.cookies, ev.Cookie)
				if len(w.cookies) > 64 {
					w.cookies = w.cookies[1:]
				}
			}
			continue
		}
		if mask&syscall.IN_MOVED_TO != 0 && w.seenUpload(ev.Cookie) {
			found = append(found, watchEvent{fsPath(p), "create", false}, watchEvent{fsPath(p), "write", false})
			continue
		}
		for _, k := range kinds {
			if mask&k.bits != 0 {
				found = append(found, watchEvent{fsPath(p), k.name, isDir})
			}
		}
		if w.recursive && isDir && mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0 {
			full := strings.TrimRight(w.root, "/") + "/" + p
			if err := w.add(full, p, false); err != nil {
				dropped++
			} else if err := w.addBelow(full, p, &found); err != nil {
				dropped++
			}
		}
	}
	w.mu.Lock()
	w.dropped += dropped
	for _, e := range found {
		if len(w.events) >= maxEvents {
			w.events = w.events[1:]
			w.dropped++
		}
		w.events = append(w.events, e)
	}
	if len(found) > 0 || dropped > 0 {
		w.notify()
	}
	w.mu.Unlock()
	return ended
}

// take hands out the queued events (waiting up to wait for one) and the drop count.
func (w *Watch) take(wait time.Duration, done <-chan struct{}) map[string]any {
	if wait > maxWait {
		wait = maxWait
	}
	w.mu.Lock()
	if len(w.events) == 0 && !w.closed && wait > 0 {
		ch := w.changed
		w.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-done:
		}
		t.Stop()
		w.mu.Lock()
	}
	events := w.events
	if events == nil {
		events = []watchEvent{}
	}
	w.events = nil
	dropped := w.dropped
	w.dropped = 0
	closed := w.closed
	w.mu.Unlock()
	return map[string]any{"events": events, "dropped": dropped, "closed": closed}
}
