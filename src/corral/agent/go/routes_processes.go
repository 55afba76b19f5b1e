package main

// The process routes of docs/agent-protocol.md: start (answered or streamed), list, events,
// stdin, signals, resize, forget.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
)

// -- processes --------------------------------------------------------------------------------

func (q *request) routeProcesses(method string, rest []string) error {
	agent := q.agent
	if len(rest) == 0 {
		switch method {
		case "POST":
			return q.startProcess()
		case "GET":
			procs := agent.allProcesses()
			list := make([]map[string]any, 0, len(procs))
			for _, p := range procs {
				list = append(list, p.describe())
			}
			q.sendJSON(200, map[string]any{"processes": list})
			return nil
		}
		return newError(404, "not_found", "no route %s %s", method, q.r.URL.RequestURI())
	}
	pid64, err := parseIntText(rest[0], "pid", nil)
	if err != nil {
		return err
	}
	pid := int(pid64)
	action := ""
	if len(rest) == 2 {
		action = rest[1]
	}
	switch {
	case len(rest) == 1 && method == "GET":
		p, err := agent.get(pid)
		if err != nil {
			return err
		}
		q.sendJSON(200, p.describe())
		return nil
	case len(rest) == 1 && method == "DELETE":
		if err := agent.forget(pid); err != nil {
			return err
		}
		q.sendEmpty()
		return nil
	case action == "events" && method == "GET":
		p, err := agent.get(pid)
		if err != nil {
			return err
		}
		after, err := parseIntText(q.query["after"], "after", intp(-1))
		if err != nil {
			return err
		}
		follow, err := parseFlag(q.query, "follow", false)
		if err != nil {
			return err
		}
		end := int64(-2) // follow: no end
		if !follow {
			end = p.snapshotEnd()
		}
		q.streamHead()
		q.streamEvents(p, p.attach(after), after, end)
		return nil
	case action == "stdin" && method == "POST":
		p, err := agent.get(pid)
		if err != nil {
			return err
		}
		return q.writeStdin(p)
	case action == "close-stdin" && method == "POST":
		p, err := agent.get(pid)
		if err != nil {
			return err
		}
		p.closeStdin()
		q.sendEmpty()
		return nil
	case action == "resize" && method == "POST":
		p, err := agent.get(pid)
		if err != nil {
			return err
		}
		body, err := q.readJSON()
		if err != nil {
			return err
		}
		if err := p.resize(body); err != nil {
			return err
		}
		q.sendEmpty()
		return nil
	case action == "signal" && method == "POST":
		p, err := agent.get(pid)
		if err != nil {
			return err
		}
		body, err := q.readJSON()
		if err != nil {
			return err
		}
		signum, err := parseSignal(body["signal"])
		if err != nil {
			return err
		}
		p.setStopped()
		sent, serr := p.killGroup(signum, false)
		if serr != nil {
			return osError(serr, fmt.Sprintf("sending signal %d to process %d", signum, pid))
		}
		if !sent {
			return newError(409, "conflict", "process %d has already finished", pid)
		}
		q.sendEmpty()
		return nil
	}
	return newError(404, "not_found", "no route %s %s", method, q.r.URL.RequestURI())
}

func (q *request) startProcess() error {
	stream, err := parseFlag(q.query, "stream", false)
	if err != nil {
		return err
	}
	body, err := q.readJSON()
	if err != nil {
		return err
	}
	forget, err := parseFlag(q.query, "forget", false)
	if err != nil {
		return err
	}
	p, fid, err := q.agent.spawn(body, stream)
	if err != nil {
		return err
	}
	if !stream {
		q.sendJSON(201, map[string]int{"pid": p.pid})
		return nil
	}
	// The head leaves with the first batch, which is never empty here (the start event): one
	// write to the daemon rather than two.
	q.streamHeadUnflushed()
	// The context ends when the client closed the connection: a write to it may still have
	// succeeded, so the exit event reached nobody and the process stays to reconnect to.
	if q.streamEvents(p, fid, -1, -2) && forget && q.r.Context().Err() == nil {
		q.agent.forgetDelivered(p)
	}
	return nil
}

func (q *request) streamHead() {
	q.streamHeadUnflushed()
	if f, ok := q.w.(http.Flusher); ok {
		f.Flush()
	}
}

// streamHeadUnflushed sets the stream's head; it is sent with the first flush of events.
func (q *request) streamHeadUnflushed() {
	q.w.Header().Set("Content-Type", "application/x-ndjson")
	q.w.WriteHeader(200)
}

// streamEvents writes the events after `after` (up to end, or following when end is -2) as
// NDJSON, flushed batch by batch; true once the last one was written, false if the client went
// away before. The last batch is left to the server's end of the answer, which writes it with
// the chunked body's end in one write: the daemon, which reads to that end before its caller
// has the exit, is not woken twice.
func (q *request) streamEvents(p *Process, fid int, after, end int64) bool {
	defer p.detach(fid)
	cursor := after
	flusher, _ := q.w.(http.Flusher)
	done := q.r.Context().Done()
	for {
		data, next, finished, ok := p.nextBatch(fid, cursor, end, done)
		if !ok {
			return false // the client went away
		}
		cursor = next
		if len(data) > 0 {
			if _, err := q.w.Write(data); err != nil {
				return false
			}
			if flusher != nil && !finished {
				flusher.Flush()
			}
		}
		if finished {
			return true
		}
	}
}

func (q *request) writeStdin(p *Process) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil && !p.hadStdin {
		return newError(409, "conflict", "process %d was started without stdin", p.pid)
	}
	if p.stdin == nil {
		return newError(409, "conflict", "stdin of process %d is closed", p.pid)
	}
	buf := make([]byte, 64*1024)
	for {
		n, rerr := q.r.Body.Read(buf)
		if n > 0 {
			if _, err := p.stdin.Write(buf[:n]); err != nil {
				if errors.Is(err, syscall.EPIPE) {
					return newError(409, "conflict", "process %d no longer reads its stdin", p.pid)
				}
				return osError(err, fmt.Sprintf("writing to the stdin of process %d", p.pid))
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return errClientGone
		}
	}
	q.sendEmpty()
	return nil
}
