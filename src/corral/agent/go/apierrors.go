package main

// The agent's error answers: apiError ({"error", "code"} with a status) and the translation of
// OS errors into them, with the C library's messages as the Python agent gives them.

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
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
