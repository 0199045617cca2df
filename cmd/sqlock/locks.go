package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlock/sqlock/inspect"
)

func locksCmd(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("locks", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database (default $DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print the snapshot as JSON")
	watch := fs.Bool("watch", false, "refresh in place until interrupted")
	every := fs.Duration("every", 2*time.Second, "refresh interval of --watch")
	slow := fs.Duration("slow", time.Second, "waits at least this long stand out")
	var names nameList
	fs.Var(&names, "name", "a key name to resolve (repeatable)")
	rest, err := flags(fs, args)
	switch {
	case err != nil:
		return err
	case len(rest) > 0:
		return usageError{"locks takes no arguments"}
	case *every <= 0 || *slow <= 0:
		return usageError{"--every and --slow must be positive"}
	}
	opts := []inspect.Option{inspect.WithNames(names...)}
	if slices.Contains(names, "") {
		return usageError{"--name must not be empty"}
	}
	db, err := open(ctx, *dsn, e)
	if err != nil {
		return err
	}
	defer db.Close()
	show := func() error {
		snap, err := inspect.Take(ctx, db, opts...)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, snap)
		}
		return writeLocks(e.stdout, snap, *slow, e.tty)
	}
	if !*watch {
		return show()
	}
	return watchLoop(ctx, e, *every, show)
}

// watchLoop redraws every interval: on a terminal in place (cursor home,
// clear to the end), otherwise one frame after another, separated by a
// blank line.
func watchLoop(ctx context.Context, e env, every time.Duration, show func() error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for first := true; ; first = false {
		switch {
		case e.tty:
			fmt.Fprint(e.stdout, "\x1b[H\x1b[2J")
		case !first:
			fmt.Fprintln(e.stdout)
		}
		if err := show(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Column widths: they add up to 100 with the separating spaces.
const (
	wKey, wMode, wScope, wState, wPID, wFor, wWho = 26, 4, 7, 5, 7, 7, 21
	wBlocked                                      = 100 - (wKey + wMode + wScope + wState + wPID + wFor + wWho) - 7
)

func writeLocks(w io.Writer, s *inspect.Snapshot, slow time.Duration, tty bool) error {
	held, waiting := 0, 0
	var longest *inspect.Lock
	for i, l := range s.Locks {
		if l.Granted {
			held++
		} else {
			waiting++
			if longest == nil || l.For > longest.For {
				longest = &s.Locks[i]
			}
		}
	}
	head := fmt.Sprintf("advisory locks at %s: %d held, %d waiting", s.At.Format("15:04:05"), held, waiting)
	if longest != nil {
		head += fmt.Sprintf("; longest wait %s on %s", dur(longest.For, false), longest.KeyLabel())
	}
	fmt.Fprintln(w, fit(head, 100))
	if len(s.Locks) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, row("KEY", "MODE", "SCOPE", "STATE", "PID", "FOR", "APPLICATION@CLIENT", "BLOCKED BY"))
	}
	var prev string
	for _, l := range s.Locks {
		key := l.KeyLabel()
		if key == prev {
			key = "  ″" // same key as the row above
		}
		prev = l.KeyLabel()
		mode, state := "excl", "held"
		if l.Shared {
			mode = "shr"
		}
		if !l.Granted {
			state = "WAIT"
		}
		blocked := make([]string, len(l.BlockedBy))
		for i, p := range l.BlockedBy {
			blocked[i] = strconv.Itoa(p)
		}
		line := row(key, mode, l.Scope.String(), state, strconv.Itoa(l.Session.PID), dur(l.For, l.AtMost),
			who(l.Session), strings.Join(blocked, ","))
		if !l.Granted && l.For >= slow {
			line = strings.TrimRight(line, " ")
			if tty {
				line = "\x1b[1;31m" + line + "\x1b[0m"
			} else {
				line = "!" + line[1:]
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	if chains := chains(s); len(chains) > 0 {
		fmt.Fprintln(w, "\nwaits for (→) …, ending at a holder:")
		for _, c := range chains {
			fmt.Fprintln(w, "  "+fit(c, 98))
		}
	}
	if !slices.ContainsFunc(s.Locks, func(l inspect.Lock) bool { return l.Name != "" }) && len(s.Locks) > 0 {
		fmt.Fprintln(w, "\n(no key names known: use advisory.WithKeyNames in the services, or --name NAME)")
	}
	if len(s.Leases) > 0 {
		fmt.Fprintln(w)
		writeLeaseRows(w, s)
	}
	return nil
}

func row(key, mode, scope, state, pid, dur, who, blocked string) string {
	return pad(" "+key, wKey) + " " + pad(mode, wMode) + " " + pad(scope, wScope) + " " + pad(state, wState) + " " +
		lpad(pid, wPID) + " " + lpad(dur, wFor) + " " + pad(who, wWho) + " " + fit(blocked, wBlocked)
}

func who(s inspect.Session) string {
	w := s.ApplicationName
	if w == "" {
		w = s.User
	}
	if s.ClientAddr != "" {
		w += "@" + s.ClientAddr
	}
	return w
}

// chains follows each waiter that nobody waits for to a holder, through
// the waiters it queues behind: "12347 (worker) → 12346 → 12345 holds
// booking:seat-42".
func chains(s *inspect.Snapshot) []string {
	waitsFor := map[int][]int{}
	app := map[int]string{}
	holds := map[int]string{}
	blocker := map[int]bool{}
	for _, l := range s.Locks {
		app[l.Session.PID] = l.Session.ApplicationName
		if l.Granted {
			if _, ok := holds[l.Session.PID]; !ok {
				holds[l.Session.PID] = l.KeyLabel()
			}
			continue
		}
		waitsFor[l.Session.PID] = l.BlockedBy
		for _, p := range l.BlockedBy {
			blocker[p] = true
		}
	}
	var out []string
	for _, l := range s.Locks {
		p := l.Session.PID
		if l.Granted || blocker[p] {
			continue
		}
		seen := map[int]bool{}
		parts := []string{label(p, app)}
		for !seen[p] {
			seen[p] = true
			next := 0
			for _, b := range waitsFor[p] { // a blocker that itself waits makes the longer chain
				if next == 0 || len(waitsFor[b]) > 0 {
					next = b
				}
			}
			if next == 0 {
				break
			}
			p = next
			parts = append(parts, label(p, app))
		}
		c := strings.Join(parts, " → ")
		if k, ok := holds[p]; ok {
			c += " holds " + k
		}
		out = append(out, c)
	}
	return out
}

func label(pid int, app map[int]string) string {
	if a := app[pid]; a != "" {
		return fmt.Sprintf("%d (%s)", pid, a)
	}
	return strconv.Itoa(pid)
}

// dur formats a duration in at most 7 characters: "850ms", "12.3s",
// "4m05s", "3h12m"; "≤" marks an upper bound.
func dur(d time.Duration, atMost bool) string {
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		s = fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 100*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if atMost {
		return "≤" + s
	}
	return s
}

func pad(s string, n int) string {
	s = fit(s, n)
	return s + strings.Repeat(" ", n-utf8.RuneCountInString(s))
}

func lpad(s string, n int) string {
	s = fit(s, n)
	return strings.Repeat(" ", n-utf8.RuneCountInString(s)) + s
}

// fit cuts s to n runes, marking the cut with "…".
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// jsonLock is a lock as --json prints it.
type jsonLock struct {
	Key       string     `json:"key"` // the bigint, or "a,b" for a pair
	Name      string     `json:"name,omitempty"`
	Mode      string     `json:"mode"`
	Scope     string     `json:"scope"`
	Granted   bool       `json:"granted"`
	Seconds   float64    `json:"seconds"` // waited or held
	AtMost    bool       `json:"at_most"` // seconds is an upper bound
	BlockedBy []int      `json:"blocked_by"`
	PID       int        `json:"pid"`
	User      string     `json:"user"`
	App       string     `json:"application_name"`
	Client    string     `json:"client_addr"`
	Backend   time.Time  `json:"backend_start"`
	Xact      *time.Time `json:"xact_start"`
	State     string     `json:"state"`
}

func writeJSON(w io.Writer, s *inspect.Snapshot) error {
	out := struct {
		At     time.Time   `json:"at"`
		Locks  []jsonLock  `json:"locks"`
		Leases []jsonLease `json:"leases"`
	}{At: s.At, Locks: []jsonLock{}, Leases: []jsonLease{}}
	for _, l := range s.Locks {
		j := jsonLock{Key: string(l.Key.AppendArgs(nil)), Name: l.Name, Mode: "exclusive", Scope: l.Scope.String(),
			Granted: l.Granted, Seconds: l.For.Seconds(), AtMost: l.AtMost, BlockedBy: l.BlockedBy,
			PID: l.Session.PID, User: l.Session.User, App: l.Session.ApplicationName, Client: l.Session.ClientAddr,
			Backend: l.Session.BackendStart, State: l.Session.State}
		if l.Shared {
			j.Mode = "shared"
		}
		if j.Scope == "?" {
			j.Scope = "unknown"
		}
		if j.BlockedBy == nil {
			j.BlockedBy = []int{}
		}
		if !l.Session.XactStart.IsZero() {
			x := l.Session.XactStart
			j.Xact = &x
		}
		out.Locks = append(out.Locks, j)
	}
	for _, l := range s.Leases {
		out.Leases = append(out.Leases, leaseJSON(l))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func isTTY(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}
