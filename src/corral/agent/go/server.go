package main

// The HTTP side: serving connections, authorizing each request by the agent's key, dispatching
// the routes of docs/agent-protocol.md (processes in routes_processes.go, files and watches in
// routes_files.go), the rekey; errors answered as {"error", "code"} with their status
// (apierrors.go); request JSON read as a raw object whose fields each route checks the way the
// Python agent does (jsonfields.go).

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
)

const (
	protocolVersion = "1"
	maxJSONBody     = 16 * 1024 * 1024
	fileChunk       = 1024 * 1024
)

// -- the server -------------------------------------------------------------------------------

type handler struct {
	agent *Agent
	trim  memoryTrim
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
	h.trim.touch()
	defer h.trim.touch()
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
