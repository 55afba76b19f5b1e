package main

import (
	"testing"
	"time"
)

func newCountingTrim() (*memoryTrim, *int) {
	count := 0
	return &memoryTrim{ended: func() { count++ }}, &count
}

func TestAQuietSpellEndingOnTimeTrims(t *testing.T) {
	trim, freed := newCountingTrim()
	trim.touch()
	trim.timer.Stop()
	trim.armedAt = time.Now().Add(-quietBeforeTrim)
	trim.quiet()
	if *freed != 1 {
		t.Fatalf("a spell that ended on time freed %d times, want 1", *freed)
	}
}

func TestASpellCutShortByACheckpointStartsOverOnce(t *testing.T) {
	trim, freed := newCountingTrim()
	trim.touch()
	trim.timer.Stop()
	trim.armedAt = time.Now().Add(-time.Minute) // the clock moved on while the sandbox was saved
	trim.quiet()
	if *freed != 0 || !trim.resumed {
		t.Fatalf("a late spell freed %d times (resumed %v), want 0 and a new spell", *freed, trim.resumed)
	}
	trim.timer.Stop()
	trim.armedAt = time.Now().Add(-time.Minute) // late again: a starved host, not another restore
	trim.quiet()
	if *freed != 1 {
		t.Fatalf("the restarted spell freed %d times, want 1", *freed)
	}
}

func TestARequestDuringTheEndKeepsTheSpellGoing(t *testing.T) {
	trim, freed := newCountingTrim()
	trim.touch() // a request re-armed the timer just as it fired
	trim.timer.Stop()
	trim.quiet()
	if *freed != 0 {
		t.Fatalf("a re-armed spell freed %d times, want 0", *freed)
	}
}
