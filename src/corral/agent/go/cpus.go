package main

// The CPU count the sandbox's processes see: CORRAL_AGENT_CPUS, set once at start (see
// src/corral/agent/cpus.py for why the sandbox itself has more). The affinity is narrowed on
// every thread at once (syscall.AllThreadsSyscall), so whichever thread forks a child, the child
// inherits it; with CAP_SYS_ADMIN still held, a read-only file listing the kept CPUs is bound
// over /sys/devices/system/cpu/online. Presentation only: a failure is logged, never fatal.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

const cpuOnline = "/sys/devices/system/cpu/online"

// cpuMask is package-level so the pointer handed to the kernel stays valid during the call.
var cpuMask [16]uint64

func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func presentCPUs(bindSysfs bool) {
	count, err := strconv.Atoi(os.Getenv(envPrefix + "CPUS"))
	if err != nil || count < 1 {
		return
	}
	size := unsafe.Sizeof(cpuMask)
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, size, uintptr(unsafe.Pointer(&cpuMask[0]))); e != 0 {
		return
	}
	var have []int
	for cpu := 0; cpu < len(cpuMask)*64; cpu++ {
		if cpuMask[cpu/64]>>(cpu%64)&1 == 1 {
			have = append(have, cpu)
		}
	}
	if count >= len(have) {
		return
	}
	keep := have[:count]
	cpuMask = [16]uint64{}
	for _, cpu := range keep {
		cpuMask[cpu/64] |= 1 << (cpu % 64)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, size, uintptr(unsafe.Pointer(&cpuMask[0]))); e != 0 {
		logf("the CPU count stays gVisor's: setting the affinity: %s", strerror(e))
		return
	}
	if bindSysfs {
		if err := bindOnline(cpuList(keep)); err != nil {
			logf("the CPU count stays gVisor's: %v", err)
		}
	}
}

// bindOnline binds a read-only file holding listed over cpuOnline; the file lives on a private
// tmpfs that is detached at once, so nothing else shows it.
func bindOnline(listed string) error {
	scratch := fmt.Sprintf("/tmp/.corral-cpus-%d", os.Getpid())
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return err
	}
	defer os.Remove(scratch)
	if err := syscall.Mount("tmpfs", scratch, "tmpfs", 0, "size=4k"); err != nil {
		return fmt.Errorf("mounting: %s", strerror(err))
	}
	defer syscall.Unmount(scratch, syscall.MNT_DETACH)
	source := scratch + "/online"
	fd, err := syscall.Open(source, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o444)
	if err != nil {
		return err
	}
	_, err = syscall.Write(fd, []byte(listed+"\n"))
	syscall.Close(fd)
	if err != nil {
		return err
	}
	if err := syscall.Mount(source, cpuOnline, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding: %s", strerror(err))
	}
	if err := syscall.Mount("", cpuOnline, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("remounting read-only: %s", strerror(err))
	}
	return nil
}
