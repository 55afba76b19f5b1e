package main

// The agent's start, step by step: with CORRAL_AGENT_TRACE set in its environment, the agent
// writes one line to stderr just before it serves, "corral agent start: main=T listen=T ...",
// with the wall-clock time (Unix ns, comparable with the host's clock: gVisor's realtime clock
// follows the host's) at which each step of its start ended. For measuring where a sandbox's
// boot goes (bench/, the issue 14 notes); nothing is recorded without it.

import (
	"os"
	"strconv"
	"strings"
	"time"
)

var startSteps []string

var tracing = os.Getenv(envPrefix+"TRACE") != ""

// startStep records that the step called name of the start has just ended.
func startStep(name string) {
	if tracing {
		startSteps = append(startSteps, name+"="+strconv.FormatInt(time.Now().UnixNano(), 10))
	}
}

// reportStart writes the recorded steps as one line to stderr.
func reportStart() {
	if tracing {
		os.Stderr.WriteString("corral agent start: " + strings.Join(startSteps, " ") + "\n")
	}
}
