package main

// The sandbox's root on its own sized disk, entered once at start, and CAP_SYS_ADMIN dropped
// for good (see src/corral/agent/disk_root.py for why). Capabilities are per thread in Linux and
// the Go runtime runs several threads, so the drop is made on every thread at once
// (syscall.AllThreadsSyscall); a failed drop ends the agent.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

const (
	capSysAdmin   = 21
	prCapbsetDrop = 24
	linuxCapV3    = 0x20080522
)

// readSmallFile reads a small file (of /proc) by plain system calls: the start's reads do not
// set up the runtime's poller, which os.Open would (an epoll instance, then a registration
// attempt per file), before the agent serves anything.
func readSmallFile(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	var data []byte
	buf := make([]byte, 16*1024)
	for len(data) < 1<<20 {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	return string(data), nil
}

func hasSysAdmin() bool {
	status, err := readSmallFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(status, "\n") {
		if strings.HasPrefix(line, "CapBnd:") {
			v, err := strconv.ParseUint(strings.TrimSpace(line[7:]), 16, 64)
			return err == nil && v>>capSysAdmin&1 == 1
		}
	}
	return false
}

type carried struct {
	point string
	flags uintptr
}

func mountsToCarry(disk string) ([]carried, error) {
	mountinfo, err := readSmallFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	flagsOf := map[string]uintptr{"ro": syscall.MS_RDONLY, "nosuid": syscall.MS_NOSUID, "nodev": syscall.MS_NODEV, "noexec": syscall.MS_NOEXEC}
	var out []carried
	for _, line := range strings.Split(mountinfo, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 {
			continue
		}
		point := fields[4]
		if point == "/" || point == "/tmp" || point == disk || strings.HasPrefix(point, disk+"/") {
			continue
		}
		var flags uintptr
		for _, option := range strings.Split(fields[5], ",") {
			flags |= flagsOf[option]
		}
		out = append(out, carried{point, flags})
	}
	return out, nil
}

func enterDiskRoot(disk string) error {
	upper, work, fresh := disk+"/upper", disk+"/work", disk+"/root"
	for _, dir := range []string{upper, work, fresh} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
	}
	options := fmt.Sprintf("lowerdir=/,upperdir=%s,workdir=%s", upper, work)
	startStep("mkdirs")
	if err := syscall.Mount("overlay", fresh, "overlay", 0, options); err != nil {
		return fmt.Errorf("mounting the overlay: %s", strerror(err))
	}
	startStep("overlay")
	points, err := mountsToCarry(disk)
	if err != nil {
		return err
	}
	startStep("mountinfo")
	for _, c := range points {
		target := fresh + c.point
		if err := syscall.Mount(c.point, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %s", c.point, strerror(err))
		}
		if c.flags != 0 {
			if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|c.flags, ""); err != nil {
				return fmt.Errorf("remounting %s: %s", c.point, strerror(err))
			}
		}
	}
	startStep("binds")
	if err := syscall.PivotRoot(fresh, fresh+disk); err != nil {
		return fmt.Errorf("pivoting: %s", strerror(err))
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Unmount(disk, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %s", strerror(err))
	}
	startStep("pivot")
	if st, err := os.Stat("/tmp"); err != nil || !st.IsDir() {
		_ = os.Mkdir("/tmp", 0o777)
	}
	return os.Chmod("/tmp", 0o777|os.ModeSticky)
}

type capHeader struct {
	version uint32
	pid     int32
}

type capData struct {
	effective, permitted, inheritable uint32
}

func dropSysAdmin() error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prCapbsetDrop, capSysAdmin, 0); e != 0 {
		return fmt.Errorf("dropping CAP_SYS_ADMIN: %s", strerror(e))
	}
	header := capHeader{version: linuxCapV3}
	var data [2]capData
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&header)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("reading capabilities: %s", strerror(e))
	}
	keep := ^uint32(1 << capSysAdmin)
	data[0].effective &= keep
	data[0].permitted &= keep
	data[0].inheritable &= keep
	header.pid = 0
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&header)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("dropping CAP_SYS_ADMIN: %s", strerror(e))
	}
	if hasSysAdmin() {
		return fmt.Errorf("CAP_SYS_ADMIN is still in the bounding set after dropping it")
	}
	return nil
}
