package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// scene: two holders, three waiters in one chain and beside it, one lease.
//
//	A (api)      holds  booking:seat-42  (session lock, named by WithKeyNames)
//	B (waiter-b) waits  booking:seat-42  exclusive, for A
//	C (waiter-c) waits  booking:seat-42  shared, for A and B: the chain C → B → A
//	D (report)   holds  report:daily     in a transaction
//	F (waiter-f) waits  report:daily     exclusive, for D
//	one lease nightly-export
type scene struct {
	db            *pgtest.DB
	a, b, c, d, f int
	token         int64
}

func newScene(t *testing.T) scene {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	seat, report := advisory.KeyOf("booking:seat-42"), advisory.KeyOf("report:daily")
	seatN, _ := seat.Int64()
	reportN, _ := report.Int64()

	// A holds the seat through a Locker that records its key names.
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "api"
	h := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { h.Close() })
	held, err := advisory.New(h, advisory.WithKeyNames(), advisory.WithKeepalive(time.Hour)).Lock(ctx, seat)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release(context.Background()) })
	// The pool may hold more than one "api" connection (the key-name
	// write can take its own): A is the one granted the advisory lock.
	var pidA int
	if err := probe.QueryRow(ctx, `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.application_name = 'api' AND l.locktype = 'advisory' AND l.granted`).Scan(&pidA); err != nil {
		t.Fatal(err)
	}
	b, c := session(t, db, "waiter-b"), session(t, db, "waiter-c")
	d, f := session(t, db, "report"), session(t, db, "waiter-f")
	bDone := wait(t, probe, b, "SELECT pg_advisory_lock($1)", seatN)
	cDone := wait(t, probe, c, "SELECT pg_advisory_lock_shared($1)", seatN)
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", reportN); err != nil {
		t.Fatal(err)
	}
	fDone := wait(t, probe, f, "SELECT pg_advisory_lock($1)", reportN)
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(db.SQL()).Acquire(ctx, "nightly-export", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Release(context.Background()) })
	// At the end, cancel the waits (a pgx connection cannot be closed
	// while a statement runs on it) and let the goroutines end.
	t.Cleanup(func() {
		for _, p := range []int{pid(b), pid(c), pid(f)} {
			probe.Exec(context.Background(), "SELECT pg_cancel_backend($1)", p)
		}
		<-bDone
		<-cDone
		<-fDone
	})
	return scene{db: db, a: pidA, b: pid(b), c: pid(c), d: pid(d), f: pid(f), token: ls.Token()}
}

func TestLocksShowsHoldersWaitersChainAndLeases(t *testing.T) {
	s := newScene(t)
	r := runCmd(t, s.db.DSN, "locks", "--name", "report:daily")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	out := r.stdout
	mustContain(t, out, "2 held, 3 waiting", "longest wait")
	for _, want := range []struct {
		pid   int
		parts []string
	}{
		{s.a, []string{"booking:seat-42", "excl", "session", "held", "api"}},
		{s.b, []string{"excl", "session", "WAIT", "waiter-b", itoa(s.a)}},
		{s.c, []string{"shr", "session", "WAIT", "waiter-c", itoa(s.a), itoa(s.b)}},
		{s.d, []string{"report:daily", "excl", "xact", "held", "report"}},
		{s.f, []string{"excl", "WAIT", "waiter-f", itoa(s.d)}},
	} {
		line := lineWith(out, " "+itoa(want.pid)+" ")
		if line == "" {
			t.Errorf("no row for pid %d", want.pid)
			continue
		}
		for _, p := range want.parts {
			if !strings.Contains(line, p) {
				t.Errorf("row of pid %d lacks %q: %q", want.pid, p, line)
			}
		}
	}
	// The chain, from the waiter nobody waits for to the holder.
	if lineWith(out, itoa(s.c)+" (waiter-c) → "+itoa(s.b)+" (waiter-b) → "+itoa(s.a)+" (api) holds booking:seat-42") == "" {
		t.Errorf("no chain C → B → A")
	}
	if lineWith(out, itoa(s.f)+" (waiter-f) → "+itoa(s.d)+" (report) holds report:daily") == "" {
		t.Errorf("no chain F → D")
	}
	if lineWith(out, "nightly-export", itoa(int(s.token))) == "" {
		t.Errorf("no lease row")
	}
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("escape sequences written to a non-terminal")
	}
}

// Waits past --slow are marked; shorter ones are not. The thresholds hold
// at any speed: every wait has lasted at least 1ns by the time it is read
// (the snapshot is a later statement than the one that saw it wait), and
// none an hour.
func TestLocksMarksLongWaits(t *testing.T) {
	s := newScene(t)
	out := runCmd(t, s.db.DSN, "locks", "--slow", "1ns").stdout
	for _, p := range []int{s.b, s.c, s.f} {
		if l := lineWith(out, " "+itoa(p)+" "); !strings.HasPrefix(l, "!") {
			t.Errorf("the wait of %d is not marked: %q", p, l)
		}
	}
	out = runCmd(t, s.db.DSN, "locks", "--slow", "1h").stdout
	if l := lineWith(out, " "+itoa(s.b)+" "); strings.HasPrefix(l, "!") {
		t.Errorf("a short wait is marked: %q", l)
	}
	if l := lineWith(out, " "+itoa(s.a)+" "); strings.HasPrefix(l, "!") {
		t.Errorf("a holder is marked: %q", l)
	}
}

func TestLocksJSON(t *testing.T) {
	s := newScene(t)
	r := runCmd(t, s.db.DSN, "locks", "--json", "--dsn", s.db.DSN)
	var got struct {
		Locks []struct {
			Key       string `json:"key"`
			Name      string `json:"name"`
			Mode      string `json:"mode"`
			Scope     string `json:"scope"`
			Granted   bool   `json:"granted"`
			PID       int    `json:"pid"`
			BlockedBy []int  `json:"blocked_by"`
			App       string `json:"application_name"`
		} `json:"locks"`
		Leases []struct {
			Name  string `json:"name"`
			Token int64  `json:"token"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v", r.code, err)
	}
	seatN, _ := advisory.KeyOf("booking:seat-42").Int64()
	byPID := map[int]int{}
	for i, l := range got.Locks {
		byPID[l.PID] = i
	}
	if len(got.Locks) != 5 || len(got.Leases) != 1 || got.Leases[0].Token != s.token {
		t.Fatalf("%d locks, leases %+v", len(got.Locks), got.Leases)
	}
	a, c, d := got.Locks[byPID[s.a]], got.Locks[byPID[s.c]], got.Locks[byPID[s.d]]
	if a.Key != itoa64(seatN) || a.Name != "booking:seat-42" || !a.Granted || a.Mode != "exclusive" || a.App != "api" {
		t.Errorf("A: %+v", a)
	}
	if c.Granted || c.Mode != "shared" || len(c.BlockedBy) != 2 {
		t.Errorf("C: %+v", c)
	}
	if d.Scope != "xact" || d.Name != "" {
		t.Errorf("D (no --name given): %+v", d)
	}
}

// --watch redraws until interrupted; interrupting is a normal end.
func TestLocksWatchRedrawsUntilInterrupted(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{onWrite: func(all string) {
		if strings.Count(all, "advisory locks at") >= 3 {
			cancel()
		}
	}}
	r := sqlockCtx(ctx, t, db.DSN, out, "locks", "--watch", "--every", "10ms")
	if r.code != 0 || strings.Count(r.stdout, "advisory locks at") < 3 {
		t.Fatalf("exit %d, %d frames", r.code, strings.Count(r.stdout, "advisory locks at"))
	}
}

func TestLeasesCommand(t *testing.T) {
	s := newScene(t)
	r := runCmd(t, s.db.DSN, "leases")
	if r.code != 0 || lineWith(r.stdout, "nightly-export", itoa(int(s.token)), "in ") == "" {
		t.Fatalf("exit %d", r.code)
	}
	// No lease table: say so (exit 1), not an empty list.
	r = runCmd(t, pgtest.New(t).DSN, "leases")
	if r.code != exitFailed || !strings.Contains(r.stderr, "no lease table") {
		t.Fatalf("without a table: exit %d %q", r.code, r.stderr)
	}
	if r := runCmd(t, s.db.DSN, "leases", "--table", "x;drop"); r.code != exitUsage {
		t.Fatalf("bad table name: exit %d", r.code)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// `sqlock leases --table Leases_Mixed` reads the table lease made with
// lease.WithTable("Leases_Mixed") (lease quotes it, keeping the case), and
// says "no lease table" only for a table that is not there.
func TestLeasesCommandReadsATableWhoseNameHasCapitals(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if err := lease.Migrate(ctx, db.SQL(), lease.WithTable("Leases_Mixed")); err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(db.SQL(), lease.WithTable("Leases_Mixed")).Acquire(ctx, "mixed-export", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Release(context.Background()) })
	r := runCmd(t, db.DSN, "leases", "--table", "Leases_Mixed")
	if r.code != 0 || lineWith(r.stdout, "mixed-export", itoa64(ls.Token()), "in ") == "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCmd(t, db.DSN, "leases", "--table", "Leases_Mixed", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"mixed-export"`) {
		t.Fatalf("--json: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := runCmd(t, db.DSN, "leases", "--table", "leases_mixed"); r.code != exitFailed || !strings.Contains(r.stderr, "no lease table") {
		t.Fatalf("the case-folded name, which does not exist: exit %d %q", r.code, r.stderr)
	}
}
