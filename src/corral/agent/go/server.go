package main

// The HTTP side: the routes of docs/agent-protocol.md onto the process table, the files and the
// watches; errors answered as {"error", "code"} with their status; request JSON read as a raw
// object whose fields each route checks the way the Python agent does.

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
)

const (
	protocolVersion = "1"
	maxJSONBody     = 16 * 1024 * 1024
	fileChunk       = 1024 * 1024
)

// apiError is answered to the client as {"error": msg, "code": code} with status.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status, code, fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return newError(400, "bad_request", format, args...)
}

var errnoCodes = map[syscall.Errno]struct {
	status int
	code   string
}{
	syscall.ENOENT:       {404, "not_found"},
	syscall.EISDIR:       {400, "is_a_directory"},
	syscall.ENOTDIR:      {400, "not_a_directory"},
	syscall.EEXIST:       {409, "exists"},
	syscall.ENOTEMPTY:    {409, "conflict"},
	syscall.EBUSY:        {409, "conflict"},
	syscall.EACCES:       {403, "permission_denied"},
	syscall.EPERM:        {403, "permission_denied"},
	syscall.EROFS:        {403, "permission_denied"},
	syscall.ENOSPC:       {507, "no_space"},
	syscall.EDQUOT:       {507, "no_space"},
	syscall.ENAMETOOLONG: {400, "bad_request"},
	syscall.ELOOP:        {400, "bad_request"},
	syscall.EINVAL:       {400, "bad_request"},
}

func errnoOf(err error) (syscall.Errno, bool) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno, true
	}
	return 0, false
}

// strerror is the C library's message for errno (Go's own are lower-cased).
func strerror(err error) string {
	if errno, ok := errnoOf(err); ok {
		text := errno.Error()
		if text != "" {
			return strings.ToUpper(text[:1]) + text[1:]
		}
	}
	return err.Error()
}

// osError translates an OS error into an apiError saying what was being done.
func osError(err error, doing string) *apiError {
	status, code := 500, "internal"
	if errno, ok := errnoOf(err); ok {
		if c, found := errnoCodes[errno]; found {
			status, code = c.status, c.code
		}
	}
	return &apiError{status, code, doing + ": " + strerror(err)}
}

// repr quotes a string as Python's repr does for the common case, for messages.
func repr(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, "\"") {
		return "\"" + s + "\""
	}
	return "'" + strings.ReplaceAll(s, "'", "\\'") + "'"
}

// -- JSON -------------------------------------------------------------------------------------

type object map[string]json.RawMessage

func isNull(raw json.RawMessage) bool {
	return raw == nil || string(bytes.TrimSpace(raw)) == "null"
}

func decodeAny(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil
	}
	return v
}

// truthy is Python's bool() of a JSON value.
func truthy(raw json.RawMessage) bool {
	switch v := decodeAny(raw).(type) {
	case nil:
		return false
	case bool:
		return v
	case json.Number:
		f, _ := v.Float64()
		return f != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return false
}

// jsonString decodes a JSON string (ok false when it is not one).
func jsonString(raw json.RawMessage) (string, bool) {
	if raw == nil {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return decodeSurrogates(raw, s), true
}

// jsonInt decodes a JSON integer (not a float, not a bool).
func jsonInt(raw json.RawMessage) (int64, bool) {
	v, ok := decodeAny(raw).(json.Number)
	if !ok || strings.ContainsAny(string(v), ".eE") {
		return 0, false
	}
	n, err := v.Int64()
	return n, err == nil
}

func jsonStrDict(raw json.RawMessage, what string) (map[string]string, error) {
	if isNull(raw) {
		return map[string]string{}, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, badRequest("'%s' must be an object of strings", what)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := jsonString(v)
		if !ok {
			return nil, badRequest("'%s' must be an object of strings", what)
		}
		out[k] = s
	}
	return out, nil
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("null")
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// -- the server -------------------------------------------------------------------------------

type handler struct {
	agent *Agent
}

type request struct {
	w     http.ResponseWriter
	r     *http.Request
	query map[string]string
	agent *Agent
}

func serve(ln net.Listener, agent *Agent) {
	server := &http.Server{
		Handler:           &handler{agent: agent},
		MaxHeaderBytes:    1 << 20,
		ReadHeaderTimeout: 0,
		ErrorLog:          nil,
		ConnState:         agent.conns.track,
	}
	for {
		err := server.Serve(ln)
		logf("serving stopped: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
}

// parseQuery decodes a query string as urllib.parse.parse_qsl(keep_blank_values=True): the last
// value of a name wins, '+' is a space, malformed escapes are kept.
func parseQuery(raw string) map[string]string {
	out := map[string]string{}
	for _, field := range strings.Split(raw, "&") {
		if field == "" {
			continue
		}
		name, value, _ := strings.Cut(field, "=")
		out[unquote(strings.ReplaceAll(name, "+", " "))] = unquote(strings.ReplaceAll(value, "+", " "))
	}
	return out
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func unquote(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s)+0 && i+2 <= len(s)-1 {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				out = append(out, hi<<4|lo)
				i += 2
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rawPath := r.URL.EscapedPath()
	if r.URL.RawPath == "" {
		rawPath = r.URL.Path
	}
	req := &request{w: w, r: r, query: parseQuery(r.URL.RawQuery), agent: h.agent}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			logf("internal error: %v", p)
			req.sendError(newError(500, "internal", "%v", p))
		}
	}()
	if err := req.route(r.Method, rawPath); err != nil {
		var api *apiError
		if errors.As(err, &api) {
			req.sendError(api)
		} else if errors.Is(err, errClientGone) {
			panic(http.ErrAbortHandler)
		} else {
			req.sendError(newError(500, "internal", "%v", err))
		}
	}
}

var errClientGone = errors.New("the client went away")

func (q *request) sendJSON(status int, v any) {
	body := marshal(v)
	h := q.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	q.w.WriteHeader(status)
	_, _ = q.w.Write(body)
}

func (q *request) sendEmpty() {
	q.w.WriteHeader(204)
}

func (q *request) sendError(e *apiError) {
	q.sendJSON(e.status, map[string]string{"error": e.msg, "code": e.code})
}

func (q *request) readBody(limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(q.r.Body, limit+1))
	if err != nil {
		return nil, errClientGone
	}
	if int64(len(data)) > limit {
		return nil, badRequest("request body larger than %d bytes", limit)
	}
	return data, nil
}

// readJSON is the request body as a JSON object (empty when there is no body).
func (q *request) readJSON() (object, error) {
	raw, err := q.readBody(maxJSONBody)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return object{}, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, badRequest("request body is not valid JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, badRequest("request body must be a JSON object")
	}
	var obj object
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, badRequest("request body is not valid JSON: %v", err)
	}
	return obj, nil
}

func parseFlag(query map[string]string, name string, def bool) (bool, error) {
	v, ok := query[name]
	if !ok || v == "" {
		return def, nil
	}
	switch strings.ToLower(v) {
	case "1", "true", "yes":
		return true, nil
	case "0", "false", "no":
		return false, nil
	}
	return false, badRequest("query parameter %s must be true or false, not %s", repr(name), repr(v))
}

func parseIntText(v string, name string, def *int64) (int64, error) {
	if v == "" {
		if def == nil {
			return 0, badRequest("%s is required", repr(name))
		}
		return *def, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(strings.ReplaceAll(v, "_", "")), 10, 64)
	if err != nil {
		return 0, badRequest("%s must be an integer, not %s", repr(name), repr(v))
	}
	return n, nil
}

func intp(v int64) *int64 { return &v }

func authorized(header, key string) bool {
	if key == "" || header == "" {
		return false
	}
	scheme, given, _ := strings.Cut(header, " ")
	if strings.ToLower(scheme) != "bearer" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(given)), []byte(key)) == 1
}

func splitPath(path string) []string {
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

func equal(parts []string, want ...string) bool {
	if len(parts) != len(want) {
		return false
	}
	for i := range parts {
		if parts[i] != want[i] {
			return false
		}
	}
	return true
}

func (q *request) route(method, path string) error {
	parts := splitPath(path)
	agent := q.agent
	if !authorized(q.r.Header.Get("Authorization"), agent.getKey()) {
		if equal(parts, "health") && method == "GET" {
			q.sendJSON(200, map[string]bool{"ok": true})
			return nil
		}
		q.w.Header().Set("Connection", "close") // and its body is not read
		return newError(401, "unauthorized", "this agent answers only its daemon (no valid key)")
	}
	switch {
	case equal(parts, "health") && method == "GET":
		q.sendJSON(200, map[string]any{"ok": true, "version": protocolVersion, "boot_id": agent.getBootID(), "pid": os.Getpid()})
		return nil
	case equal(parts, "config") && method == "PUT":
		body, err := q.readJSON()
		if err != nil {
			return err
		}
		env, err := jsonStrDict(body["env"], "env")
		if err != nil {
			return err
		}
		agent.setEnv(env, string(bytes.TrimSpace(body["merge"])) == "true")
		q.sendEmpty()
		return nil
	case equal(parts, "rekey") && method == "POST":
		return q.rekey()
	case len(parts) > 0 && parts[0] == "processes":
		return q.routeProcesses(method, parts[1:])
	case len(parts) > 0 && parts[0] == "files":
		return q.routeFiles(method, parts[1:])
	case len(parts) > 0 && parts[0] == "watches":
		return q.routeWatches(method, parts[1:])
	}
	return newError(404, "not_found", "no route %s %s", method, path)
}

func isAlnum(s string) bool {
	for _, c := range s {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return false
		}
	}
	return true
}

func (q *request) rekey() error {
	body, err := q.readJSON()
	if err != nil {
		return err
	}
	key, ok := jsonString(body["key"])
	if !ok || !validKey(key) {
		return badRequest("'key' must be 64 lowercase hex digits")
	}
	bootID, ok := jsonString(body["boot_id"])
	if !ok || len([]rune(bootID)) == 0 || len([]rune(bootID)) > 64 || !isAlnum(bootID) {
		return badRequest("'boot_id' must be 1 to 64 letters or digits")
	}
	seed, ok := jsonString(body["seed"])
	if !ok || len(seed) > 256 || !validHexSeed(seed) {
		return badRequest("'seed' must be a hex string of at most 256 digits")
	}
	q.agent.rekey(key, bootID)
	if closed := q.agent.conns.closeDead(); closed > 0 {
		logf("closed %d connection(s) the checkpoint left dead", closed)
	}
	q.sendJSON(200, map[string]string{"boot_id": bootID})
	return nil
}

// validHexSeed accepts what Python's bytes.fromhex does: pairs of hex digits, spaces between.
func validHexSeed(s string) bool {
	digits := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' {
			if digits%2 != 0 {
				return false
			}
			continue
		}
		if _, ok := unhex(c); !ok {
			return false
		}
		digits++
	}
	return digits%2 == 0
}

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
	q.streamHead()
	// The context ends when the client closed the connection: a write to it may still have
	// succeeded, so the exit event reached nobody and the process stays to reconnect to.
	if q.streamEvents(p, fid, -1, -2) && forget && q.r.Context().Err() == nil {
		q.agent.forgetDelivered(p)
	}
	return nil
}

func (q *request) streamHead() {
	h := q.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	q.w.WriteHeader(200)
	if f, ok := q.w.(http.Flusher); ok {
		f.Flush()
	}
}

// streamEvents writes the events after `after` (up to end, or following when end is -2) as
// NDJSON, flushed batch by batch; true once the last one was written, false if the client went
// away before.
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
			if flusher != nil {
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

var _ = sync.Mutex{}
