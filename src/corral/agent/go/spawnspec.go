package main

// Reading a POST /processes body the way the Python agent does: window sizes, signals, sizes,
// the program on PATH, the user to run as, the environment.

import (
	"encoding/json"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"syscall"
)

func parseWinsize(raw json.RawMessage) (int, int, error) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return 0, 0, badRequest(`'pty' must be an object {"rows": R, "cols": C}`)
	}
	sides := [2]int{24, 80}
	for i, name := range []string{"rows", "cols"} {
		v, present := m[name]
		if !present {
			continue
		}
		n, ok := jsonInt(v)
		if !ok || n < 1 || n > maxPtySide {
			return 0, 0, badRequest("'pty.%s' must be an integer from 1 to %d", name, maxPtySide)
		}
		sides[i] = int(n)
	}
	return sides[0], sides[1], nil
}

var signalNames = map[string]int{
	"SIGABRT": 6, "SIGALRM": 14, "SIGBUS": 7, "SIGCHLD": 17, "SIGCLD": 17, "SIGCONT": 18,
	"SIGFPE": 8, "SIGHUP": 1, "SIGILL": 4, "SIGINT": 2, "SIGIO": 29, "SIGIOT": 6, "SIGKILL": 9,
	"SIGPIPE": 13, "SIGPOLL": 29, "SIGPROF": 27, "SIGPWR": 30, "SIGQUIT": 3, "SIGRTMAX": 64,
	"SIGRTMIN": 34, "SIGSEGV": 11, "SIGSTKFLT": 16, "SIGSTOP": 19, "SIGSYS": 31, "SIGTERM": 15,
	"SIGTRAP": 5, "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22, "SIGURG": 23, "SIGUSR1": 10,
	"SIGUSR2": 12, "SIGVTALRM": 26, "SIGWINCH": 28, "SIGXCPU": 24, "SIGXFSZ": 25,
}

func parseSignal(raw json.RawMessage) (int, error) {
	if n, ok := jsonInt(raw); ok {
		return int(n), nil
	}
	if s, ok := jsonString(raw); ok {
		name := strings.ToUpper(strings.TrimSpace(s))
		if name != "" && strings.Trim(name, "0123456789") == "" {
			n, err := strconv.Atoi(name)
			if err == nil {
				return n, nil
			}
		}
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
		if n, ok := signalNames[name]; ok {
			return n, nil
		}
	}
	return 0, badRequest("unknown signal %s", pyValue(raw))
}

// pyValue renders a JSON value roughly as Python's repr, for messages.
func pyValue(raw json.RawMessage) string {
	if s, ok := jsonString(raw); ok {
		return repr(s)
	}
	if isNull(raw) {
		return "None"
	}
	switch string(raw) {
	case "true":
		return "True"
	case "false":
		return "False"
	}
	return string(raw)
}

func compactSize(raw json.RawMessage, what string, limit int) (int, error) {
	size := 4 // null
	if raw != nil {
		size = len(marshal(decodeAny(raw)))
	}
	if size > limit {
		return 0, newError(413, "too_large", "%s is %d bytes as JSON; at most %d bytes are kept", what, size, limit)
	}
	return size, nil
}

func defaultShell() []string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return []string{"/bin/bash", "-l"}
	}
	return []string{"/bin/sh", "-l"}
}

// findProgram is the file program names, searched on the child's PATH as execvpe does.
func findProgram(program string, env map[string]string) (string, error) {
	if strings.Contains(program, "/") {
		return program, nil
	}
	pathVar, ok := env["PATH"]
	if !ok {
		pathVar = "/bin:/usr/bin"
	}
	denied := false
	for _, dir := range strings.Split(pathVar, ":") {
		candidate := path.Join(dir, program)
		if dir == "" {
			candidate = program
		}
		st, err := os.Stat(candidate)
		if err != nil {
			continue
		}
		if st.Mode().IsRegular() && syscall.Access(candidate, 1) == nil {
			return candidate, nil
		}
		denied = true
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", syscall.ENOENT
}

func lookupUser(raw json.RawMessage, program string, env map[string]string) (*syscall.Credential, error) {
	var u *user.User
	var err error
	if n, ok := jsonInt(raw); ok {
		u, err = user.LookupId(strconv.FormatInt(n, 10))
		if err != nil {
			return &syscall.Credential{Uid: uint32(n), Gid: uint32(n), Groups: []uint32{}}, nil
		}
	} else if s, ok := jsonString(raw); ok {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			u, err = user.LookupId(s)
			if err != nil {
				n, _ := strconv.ParseUint(s, 10, 32)
				return &syscall.Credential{Uid: uint32(n), Gid: uint32(n), Groups: []uint32{}}, nil
			}
		} else if u, err = user.Lookup(s); err != nil {
			return nil, newError(400, "exec_failed", "cannot execute %s: unknown user %s", repr(program), repr(s))
		}
	} else {
		return nil, badRequest("'user' must be a user name or uid")
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	env["HOME"] = u.HomeDir
	env["USER"] = u.Username
	env["LOGNAME"] = u.Username
	groups := []uint32{}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// spawn starts a process described by a POST /processes body; attaches a follower if asked.
