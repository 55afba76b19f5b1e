package main

// Files: protocol paths, the file operations, streamed downloads and uploads.
//
// Paths travel as text; names that are not valid UTF-8 are carried as Python's surrogateescape
// (\udcXX) in JSON (fsPath's encoding, decodeSurrogates' decoding) and as percent-encoded raw
// bytes in query strings. resolvePath normalises a protocol path as text, so ".." stays inside
// the sandbox's root. Uploads never leave a half-written file behind: the body goes to a
// temporary file in the same directory, which is fsynced and renamed over the target.

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf16"
	"unicode/utf8"
)

// fsPath is a file name or path; it encodes to JSON as Python's surrogateescape would.
type fsPath string

func (p fsPath) MarshalJSON() ([]byte, error) {
	s := string(p)
	if utf8.ValidString(s) {
		return marshal(s), nil
	}
	buf := []byte{'"'}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			buf = append(buf, `\udc`...)
			buf = append(buf, "0123456789abcdef"[s[i]>>4], "0123456789abcdef"[s[i]&15])
			i++
			continue
		}
		enc := marshal(s[i : i+size])
		buf = append(buf, enc[1:len(enc)-1]...)
		i += size
	}
	return append(buf, '"'), nil
}

// decodeSurrogates re-reads a JSON string literal, turning lone \udc80-\udcff escapes back into
// the raw bytes they carry (surrogateescape); parsed is encoding/json's reading of it.
func decodeSurrogates(raw json.RawMessage, parsed string) string {
	text := string(raw)
	if !strings.Contains(strings.ToLower(text), `\udc`) {
		return parsed
	}
	text = strings.TrimSpace(text)
	if len(text) < 2 || text[0] != '"' {
		return parsed
	}
	body := text[1 : len(text)-1]
	var out []byte
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(body) {
			return parsed
		}
		switch body[i] {
		case '"', '\\', '/':
			out = append(out, body[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+4 >= len(body)+0 && i+4 > len(body)-1+1 {
				return parsed
			}
			v, err := strconv.ParseUint(body[i+1:i+5], 16, 16)
			if err != nil {
				return parsed
			}
			i += 4
			r := rune(v)
			if utf16.IsSurrogate(r) && r < 0xdc00 && i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
				if low, err := strconv.ParseUint(body[i+3:i+7], 16, 16); err == nil {
					if pair := utf16.DecodeRune(r, rune(low)); pair != utf8.RuneError {
						out = utf8.AppendRune(out, pair)
						i += 6
						continue
					}
				}
			}
			if r >= 0xdc80 && r <= 0xdcff {
				out = append(out, byte(r-0xdc00))
				continue
			}
			out = utf8.AppendRune(out, r)
		default:
			return parsed
		}
	}
	return string(out)
}

func resolvePath(value string, present bool) (string, error) {
	if !present || value == "" {
		return "", badRequest("a non-empty 'path' is required")
	}
	if strings.Contains(value, "\x00") {
		return "", badRequest("path %s contains a NUL byte", repr(value))
	}
	return path.Clean("/" + value), nil
}

func resolveJSONPath(raw json.RawMessage) (string, error) {
	s, ok := jsonString(raw)
	if !ok {
		return "", badRequest("a non-empty 'path' is required")
	}
	return resolvePath(s, true)
}

type statEntry struct {
	Name   fsPath  `json:"name"`
	Path   fsPath  `json:"path"`
	Type   string  `json:"type"`
	Size   int64   `json:"size"`
	Mode   uint32  `json:"mode"`
	Mtime  float64 `json:"mtime"`
	Target *fsPath `json:"target"`
}

func entryOf(p string, st *syscall.Stat_t) statEntry {
	kind := "other"
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		kind = "file"
	case syscall.S_IFDIR:
		kind = "dir"
	case syscall.S_IFLNK:
		kind = "symlink"
	}
	var target *fsPath
	if kind == "symlink" {
		if t, err := os.Readlink(p); err == nil {
			tp := fsPath(t)
			target = &tp
		}
	}
	name := path.Base(p)
	if p == "/" {
		name = "/"
	}
	return statEntry{
		Name:   fsPath(name),
		Path:   fsPath(p),
		Type:   kind,
		Size:   st.Size,
		Mode:   st.Mode & 0o7777,
		Mtime:  float64(st.Mtim.Sec) + float64(st.Mtim.Nsec)/1e9,
		Target: target,
	}
}

func fileStat(p string) (statEntry, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return statEntry{}, osError(err, "stat "+repr(p))
	}
	return entryOf(p, &st), nil
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

func listDir(p string, depth int) ([]statEntry, error) {
	entries := []statEntry{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		names, err := readDirNames(dir)
		if err != nil {
			if level == 1 {
				return osError(err, "listing "+repr(dir))
			}
			return nil
		}
		base := strings.TrimRight(dir, "/")
		for _, name := range names {
			child := base + "/" + name
			var st syscall.Stat_t
			if syscall.Lstat(child, &st) != nil {
				continue
			}
			entries = append(entries, entryOf(child, &st))
			if level < depth && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				_ = walk(child, level+1)
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, err
	}
	return entries, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func makeDir(p string, parents bool) (bool, error) {
	existed := isDir(p)
	var err error
	if parents {
		if !existed {
			if _, serr := os.Lstat(p); serr == nil {
				err = syscall.EEXIST
			} else {
				err = os.MkdirAll(p, 0o777)
			}
		}
	} else {
		err = syscall.Mkdir(p, 0o777)
	}
	if err != nil {
		if errno, ok := errnoOf(err); ok && errno == syscall.EEXIST {
			if isDir(p) {
				return false, nil
			}
			return false, newError(409, "exists", "creating directory %s: a non-directory exists there", repr(p))
		}
		return false, osError(err, "creating directory "+repr(p))
	}
	return !existed, nil
}

// copyTree copies src to dst (a file, a symlink or a directory tree), as shutil.move does across
// file systems before removing the source.
func copyTree(src, dst string) error {
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case st.IsDir():
		if err := os.Mkdir(dst, st.Mode().Perm()); err != nil {
			return err
		}
		names, err := readDirNames(src)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := copyTree(src+"/"+name, dst+"/"+name); err != nil {
				return err
			}
		}
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func movePath(src, dst string) (statEntry, error) {
	err := syscall.Rename(src, dst)
	if err == syscall.EXDEV {
		target := dst
		if isDir(dst) {
			target = strings.TrimRight(dst, "/") + "/" + path.Base(src)
		}
		if err = copyTree(src, target); err == nil {
			err = os.RemoveAll(src)
		}
	}
	if err != nil {
		return statEntry{}, osError(err, "moving "+repr(src)+" to "+repr(dst))
	}
	return fileStat(dst)
}

func removePath(p string, recursive bool) error {
	if p == "/" {
		return badRequest("refusing to remove '/'")
	}
	var st syscall.Stat_t
	err := syscall.Lstat(p, &st)
	if err == nil {
		switch {
		case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
			err = syscall.Unlink(p)
		case recursive:
			err = os.RemoveAll(p)
		default:
			err = syscall.Rmdir(p)
		}
	}
	if err != nil {
		e := osError(err, "removing "+repr(p))
		if errno, ok := errnoOf(err); ok && errno == syscall.ENOTEMPTY {
			e.msg += " (pass recursive=true to remove its contents)"
		}
		return e
	}
	return nil
}

// sendFile answers GET /files/content: the file's bytes with their length.
func (q *request) sendFile(p string) error {
	// O_NONBLOCK: opening a FIFO must not hang waiting for a writer.
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return osError(err, "reading "+repr(p))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return osError(err, "reading "+repr(p))
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return newError(400, "is_a_directory", "reading %s: Is a directory", repr(p))
		}
		return badRequest("reading %s: not a regular file", repr(p))
	}
	_ = syscall.SetNonblock(fd, false)
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	h := q.w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if st.Size == 0 { // /proc and /sys files report 0 but have content: read it whole
		small, err := io.ReadAll(io.LimitReader(f, maxJSONBody+1))
		if err != nil {
			return osError(err, "reading "+repr(p))
		}
		if len(small) > maxJSONBody {
			return badRequest("reading %s: reports size 0 but keeps growing", repr(p))
		}
		h.Set("Content-Length", strconv.Itoa(len(small)))
		q.w.WriteHeader(200)
		_, _ = q.w.Write(small)
		return nil
	}
	h.Set("Content-Length", strconv.FormatInt(st.Size, 10))
	q.w.WriteHeader(200)
	if rf, ok := q.w.(io.ReaderFrom); ok {
		_, _ = rf.ReadFrom(io.LimitReader(f, st.Size))
	} else {
		_, _ = io.Copy(q.w, io.LimitReader(f, st.Size))
	}
	return nil
}

// receiveFile answers PUT /files/content: the body to a temporary file, fsync, rename.
func (q *request) receiveFile(p string) error {
	var mode int64 = -1
	if v := q.query["mode"]; v != "" {
		n, err := parseIntText(v, "mode", nil)
		if err != nil {
			return err
		}
		mode = n
	}
	parents, err := parseFlag(q.query, "parents", false)
	if err != nil {
		return err
	}
	dir, name := path.Split(p)
	if name == "" {
		return badRequest("writing %s: not a file path", repr(p))
	}
	dir = strings.TrimRight(dir, "/")
	doing := "writing " + repr(p)
	if parents {
		if err := os.MkdirAll(dir+"/", 0o777); err != nil {
			return osError(err, doing)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err == nil {
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return osError(syscall.EISDIR, doing)
		}
		if mode < 0 {
			mode = int64(st.Mode & 0o7777)
		}
	}
	short := name
	if len(short) > 64 {
		short = short[:64]
	}
	temp := dir + "/." + short + ".corral-upload-" + randomHex(6)
	fd, err := syscall.Open(temp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return osError(err, doing)
	}
	f := os.NewFile(uintptr(fd), temp)
	size, err := io.Copy(f, q.r.Body)
	fail := func(err error) error {
		f.Close()
		syscall.Unlink(temp)
		return err
	}
	if err != nil {
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return fail(osError(err, doing))
		}
		return fail(errClientGone)
	}
	if mode < 0 {
		mode = 0o644
	}
	if err := f.Chmod(os.FileMode(mode&0o777) | modeBits(mode)); err != nil {
		return fail(osError(err, doing))
	}
	if err := f.Sync(); err != nil {
		return fail(osError(err, doing))
	}
	if err := f.Close(); err != nil {
		syscall.Unlink(temp)
		return osError(err, doing)
	}
	if err := syscall.Rename(temp, p); err != nil {
		syscall.Unlink(temp)
		return osError(err, doing)
	}
	if dfd, err := syscall.Open(dir+"/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
		_ = syscall.Fsync(dfd)
		syscall.Close(dfd)
	}
	q.sendJSON(200, map[string]any{"path": fsPath(p), "size": size})
	return nil
}

// modeBits carries setuid, setgid and sticky from a numeric mode into an os.FileMode.
func modeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}
