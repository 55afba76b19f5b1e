package main

// The file and watch routes of docs/agent-protocol.md: stat, list, read and write (streamed),
// make, move, remove; directory watches.

import (
	"time"
)

// -- files ------------------------------------------------------------------------------------

func (q *request) routeFiles(method string, rest []string) error {
	if len(rest) == 0 && method == "DELETE" {
		path, err := resolvePath(q.query["path"], hasKey(q.query, "path"))
		if err != nil {
			return err
		}
		recursive, err := parseFlag(q.query, "recursive", false)
		if err != nil {
			return err
		}
		if err := removePath(path, recursive); err != nil {
			return err
		}
		q.sendEmpty()
		return nil
	}
	what := ""
	if len(rest) == 1 {
		what = rest[0]
	}
	switch {
	case what == "content" && method == "GET":
		path, err := resolvePath(q.query["path"], hasKey(q.query, "path"))
		if err != nil {
			return err
		}
		return q.sendFile(path)
	case what == "content" && method == "PUT":
		path, err := resolvePath(q.query["path"], hasKey(q.query, "path"))
		if err != nil {
			return err
		}
		return q.receiveFile(path)
	case what == "stat" && method == "GET":
		path, err := resolvePath(q.query["path"], hasKey(q.query, "path"))
		if err != nil {
			return err
		}
		st, err := fileStat(path)
		if err != nil {
			return err
		}
		q.sendJSON(200, st)
		return nil
	case what == "list" && method == "GET":
		path, err := resolvePath(q.query["path"], hasKey(q.query, "path"))
		if err != nil {
			return err
		}
		depth, err := parseIntText(q.query["depth"], "depth", intp(1))
		if err != nil {
			return err
		}
		if depth < 1 {
			return badRequest("'depth' must be at least 1")
		}
		entries, err := listDir(path, int(depth))
		if err != nil {
			return err
		}
		q.sendJSON(200, map[string]any{"entries": entries})
		return nil
	case what == "mkdir" && method == "POST":
		body, err := q.readJSON()
		if err != nil {
			return err
		}
		path, err := resolveJSONPath(body["path"])
		if err != nil {
			return err
		}
		parents := true
		if raw, ok := body["parents"]; ok {
			parents = truthy(raw)
		}
		created, err := makeDir(path, parents)
		if err != nil {
			return err
		}
		q.sendJSON(200, map[string]bool{"created": created})
		return nil
	case what == "move" && method == "POST":
		body, err := q.readJSON()
		if err != nil {
			return err
		}
		src, err := resolveJSONPath(body["src"])
		if err != nil {
			return err
		}
		dst, err := resolveJSONPath(body["dst"])
		if err != nil {
			return err
		}
		st, err := movePath(src, dst)
		if err != nil {
			return err
		}
		q.sendJSON(200, st)
		return nil
	}
	return newError(404, "not_found", "no route %s %s", method, q.r.URL.RequestURI())
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// -- watches ----------------------------------------------------------------------------------

func (q *request) routeWatches(method string, rest []string) error {
	watches := q.agent.watches
	if len(rest) == 0 && method == "POST" {
		body, err := q.readJSON()
		if err != nil {
			return err
		}
		path, err := resolveJSONPath(body["path"])
		if err != nil {
			return err
		}
		w, err := watches.create(path, truthy(body["recursive"]))
		if err != nil {
			return err
		}
		q.sendJSON(201, map[string]int{"id": w.id})
		return nil
	}
	var id int64
	if len(rest) > 0 {
		var err error
		if id, err = parseIntText(rest[0], "watch id", nil); err != nil {
			return err
		}
	}
	if len(rest) == 1 && method == "DELETE" {
		if err := watches.remove(int(id)); err != nil {
			return err
		}
		q.sendEmpty()
		return nil
	}
	if len(rest) == 2 && rest[1] == "events" && method == "GET" {
		waitMs, err := parseIntText(q.query["wait_ms"], "wait_ms", intp(0))
		if err != nil {
			return err
		}
		w, err := watches.get(int(id))
		if err != nil {
			return err
		}
		q.sendJSON(200, w.take(time.Duration(waitMs)*time.Millisecond, q.r.Context().Done()))
		return nil
	}
	return newError(404, "not_found", "no route %s %s", method, q.r.URL.RequestURI())
}
