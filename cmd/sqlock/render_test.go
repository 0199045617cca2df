package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
)

// On a terminal a long wait is bold red; names and application names too
// long for their column are cut with "…", so every line still fits.
func TestLocksColorsLongWaitsOnATerminalAndCutsLongNames(t *testing.T) {
	long := strings.Repeat("tenant-0042:invoice:", 5)
	snap := &inspect.Snapshot{At: time.Now(), Locks: []inspect.Lock{
		{Key: advisory.KeyOf(long), Name: long, Granted: true, For: 90 * time.Minute, AtMost: true,
			Session: inspect.Session{PID: 101, ApplicationName: strings.Repeat("billing-worker-", 4), ClientAddr: "10.20.30.40"}},
		{Key: advisory.KeyOf(long), Name: long, For: 12300 * time.Millisecond, BlockedBy: []int{101},
			Session: inspect.Session{PID: 102, ApplicationName: "api"}},
		{Key: advisory.KeyOf(long), Name: long, For: 200 * time.Millisecond, BlockedBy: []int{101, 102},
			Session: inspect.Session{PID: 103, ApplicationName: "api"}},
	}}
	var b bytes.Buffer
	writeLocks(&b, snap, time.Second, true)
	out := b.String()
	if l := lineWith(out, " 102 "); !strings.HasPrefix(l, "\x1b[1;31m") || !strings.Contains(l, "12.3s") {
		t.Errorf("long wait: %q", l)
	}
	if l := lineWith(out, " 103 "); strings.Contains(l, "\x1b[") {
		t.Errorf("short wait colored: %q", l)
	}
	if l := lineWith(out, " 101 "); !strings.Contains(l, "≤1h30m") || !strings.Contains(l, "…") {
		t.Errorf("holder: %q", l)
	}
	for _, l := range strings.Split(out, "\n") {
		plain := strings.NewReplacer("\x1b[1;31m", "", "\x1b[0m", "").Replace(l)
		if n := utf8.RuneCountInString(plain); n > 100 {
			t.Errorf("line of %d columns: %q", n, plain)
		}
	}
}
