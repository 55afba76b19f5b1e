package main

// The sandbox's own out-of-memory killer (see src/corral/agent/oom.py, whose behaviour this
// follows): when less than max(8 MiB, 2 %) of the sandbox's memory is free as gVisor counts it
// (sysinfo), SIGKILL the process with the largest resident set, never the agent, at most once
// per 2 s while memory stays short. Runs only as PID 1, i.e. inside a sandbox.

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	mib             = 1024 * 1024
	reserveMin      = 8 * mib
	reserveFraction = 0.02
	fillRate        = 1024 * mib
	minInterval     = 5 * time.Millisecond
	maxInterval     = 500 * time.Millisecond
	cooldown        = 2 * time.Second
)

func memory() (uint64, uint64, error) {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 0, 0, err
	}
	unit := uint64(info.Unit)
	if unit == 0 {
		unit = 1
	}
	return uint64(info.Totalram) * unit, uint64(info.Freeram) * unit, nil
}

func largestProcess(exclude int) (int, uint64, string, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, "", false
	}
	page := uint64(os.Getpagesize())
	best, bestRes, bestName, found := 0, uint64(0), "", false
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == exclude {
			continue
		}
		statm, err := os.ReadFile("/proc/" + e.Name() + "/statm")
		if err != nil {
			continue
		}
		fields := strings.Fields(string(statm))
		if len(fields) < 2 {
			continue
		}
		pages, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if res := pages * page; !found || res > bestRes {
			comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
			if err != nil {
				continue
			}
			best, bestRes, bestName, found = pid, res, strings.TrimSpace(string(comm)), true
		}
	}
	return best, bestRes, bestName, found
}

func ancestry(pid int) []int {
	var chain []int
	current := pid
	seen := map[int]bool{}
	for current > 1 && !seen[current] && len(chain) < 64 {
		chain = append(chain, current)
		seen[current] = true
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(current) + "/stat")
		if err != nil {
			break
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(fields) < 2 {
			break
		}
		if current, err = strconv.Atoi(fields[1]); err != nil {
			break
		}
	}
	return chain
}

func startOomKiller(onKill func(chain []int, resident uint64, name string, total uint64)) {
	if os.Getpid() != 1 {
		return // not in a sandbox: this is someone's host
	}
	go func() {
		var cooldownUntil time.Time
		for {
			total, free, err := memory()
			if err != nil {
				return
			}
			reserve := uint64(float64(total) * reserveFraction)
			if reserve < reserveMin {
				reserve = reserveMin
			}
			now := time.Now()
			if free >= reserve {
				cooldownUntil = time.Time{}
			} else if !now.Before(cooldownUntil) {
				if pid, resident, name, ok := largestProcess(os.Getpid()); ok {
					chain := ancestry(pid)
					if syscall.Kill(pid, syscall.SIGKILL) == nil {
						if len(chain) == 0 {
							chain = []int{pid}
						}
						onKill(chain, resident, name, total)
					}
				}
				cooldownUntil = now.Add(cooldown)
			}
			var headroom uint64
			if free > reserve {
				headroom = free - reserve
			}
			interval := time.Duration(float64(headroom) / fillRate / 2 * float64(time.Second))
			if interval < minInterval {
				interval = minInterval
			}
			if interval > maxInterval {
				interval = maxInterval
			}
			time.Sleep(interval)
		}
	}()
}
