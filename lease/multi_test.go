package lease_test

import (
	"bufio"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/lease"
)

// liveOwners maps each name of names with a live lease to its owner.
func liveOwners(t testing.TB, conn *pgx.Conn, names ...string) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT name, owner::text FROM sqlock_leases
		WHERE name = ANY($1) AND expires_at > clock_timestamp()`, names)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]string{}
	for rows.Next() {
		var n, o string
		if err := rows.Scan(&n, &o); err != nil {
			t.Fatal(err)
		}
		live[n] = o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return live
}

// TestAcquireAllTakesEveryNameOrNone: AcquireAll takes its names in
// canonical order (sorted, each once), all held by one owner with tokens
// increasing in that order; while one of them is held elsewhere,
// TryAcquireAll is ErrNotAcquired and AcquireAll ErrTimeout, each leaving
// none of the others held; Release ends them all; bad input is ErrInvalid
// with nothing written. On every driver.
func TestAcquireAllTakesEveryNameOrNone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		db := newDB(t)
		conn := admin(t, db)
		ctx := t.Context()
		m := bc.open(t, db.DSN, lease.WithHolder("multi"))
		all, err := m.AcquireAll(ctx, []string{"c", "a", "b", "a"}, roomyTTL)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(all.Names(), []string{"a", "b", "c"}) {
			t.Fatalf("names %v", all.Names())
		}
		live := liveOwners(t, conn, "a", "b", "c")
		if len(live) != 3 || live["a"] != live["b"] || live["b"] != live["c"] {
			t.Fatalf("live rows %v", live)
		}
		var prev int64
		for _, n := range all.Names() {
			tok, ok := all.Token(n)
			if !ok || tok <= prev {
				t.Fatalf("token of %q: %d (%t) after %d", n, tok, ok, prev)
			}
			prev = tok
		}
		if _, err := m.TryAcquire(ctx, "b", roomyTTL); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a name AcquireAll holds: %v", err)
		}
		if err := all.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if live := liveOwners(t, conn, "a", "b", "c"); len(live) != 0 {
			t.Fatalf("after Release: %v", live)
		}
		if err := all.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("second Release: %v", err)
		}

		b, err := m.Acquire(ctx, "b", roomyTTL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.TryAcquireAll(ctx, []string{"a", "b", "c"}, roomyTTL); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquireAll with b held: %v", err)
		}
		short := bc.open(t, db.DSN, lease.WithTimeout(200*time.Millisecond))
		if _, err := short.AcquireAll(ctx, []string{"a", "b", "c"}, roomyTTL); !errors.Is(err, lease.ErrTimeout) {
			t.Fatalf("AcquireAll with b held: %v", err)
		}
		if live := liveOwners(t, conn, "a", "b", "c"); len(live) != 1 || live["b"] == "" {
			t.Fatalf("with b held elsewhere, after the refusals: %v", live)
		}
		b.Release(ctx)

		for _, names := range [][]string{nil, {}, {"a", ""}, {"a", strings.Repeat("n", 256)}} {
			if _, err := m.AcquireAll(ctx, names, roomyTTL); !errors.Is(err, lease.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Fatalf("AcquireAll(%q): %v, want ErrInvalid", names, err)
			}
		}
		if _, err := m.AcquireAll(ctx, []string{"a"}, 0); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("AcquireAll with TTL 0: %v", err)
		}
		if live := liveOwners(t, conn, "a", "b", "c"); len(live) != 0 {
			t.Fatalf("after bad input: %v", live)
		}
	})
}

// TestAcquireAllThatFailsMidwayLeavesNothing: the statement fails on its
// third name (a trigger raises there, after the first two rows were
// written): the error is returned and neither of the first two is held.
func TestAcquireAllThatFailsMidwayLeavesNothing(t *testing.T) {
	db := newDB(t)
	conn := admin(t, db)
	ctx := t.Context()
	if _, err := conn.Exec(ctx, `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'boom at %', NEW.name; END$$;
		CREATE TRIGGER boom BEFORE INSERT OR UPDATE ON sqlock_leases FOR EACH ROW WHEN (NEW.name = 'c') EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.Pool())
	if _, err := m.AcquireAll(ctx, []string{"a", "b", "c"}, roomyTTL); err == nil || !strings.Contains(err.Error(), "boom at c") {
		t.Fatalf("AcquireAll through the failing trigger: %v", err)
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sqlock_leases`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows left (%v)", rows, err)
	}
}

// TestAcquireAllKilledMidwayLeavesAllOrNone: a process that takes x, y and
// z together and releases them, over and over, is killed (SIGKILL) at a
// random moment, three times: each time the table has all three held by
// one owner (to expire together) or none, never some.
func TestAcquireAllKilledMidwayLeavesAllOrNone(t *testing.T) {
	db := newDB(t)
	conn := admin(t, db)
	for round := range 3 {
		cmd := child(t, "multi", "LEASE_DSN="+db.DSN, "LEASE_BACKEND="+[]string{"sql", "pgx"}[round%2])
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "READY\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child said %q", line)
		}
		time.Sleep(rand.N(20 * time.Millisecond)) // a random moment, not a bound
		cmd.Process.Kill()
		cmd.Wait()
		live := liveOwners(t, conn, "x", "y", "z")
		if len(live) != 0 && (len(live) != 3 || live["x"] != live["y"] || live["y"] != live["z"]) {
			t.Fatalf("round %d: killed midway, the table holds %v", round, live)
		}
		conn.Exec(t.Context(), `UPDATE sqlock_leases SET expires_at = clock_timestamp()`)
	}
}

// TestAcquireAllIsLostWhenAnyOfItsLeasesIs: one of the names expires on
// the server under its holder; the renewal of all is refused, Lost fires
// and Err matches ErrLost.
func TestAcquireAllIsLostWhenAnyOfItsLeasesIs(t *testing.T) {
	db := newDB(t)
	conn := admin(t, db)
	ctx := t.Context()
	all, err := lease.New(db.Pool()).AcquireAll(ctx, []string{"p", "q"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	expireOnServer(t, conn, "q")
	select {
	case <-all.Lost():
	case <-ctx.Done():
		t.Fatal("Lost never fired after q expired on the server")
	}
	if !errors.Is(all.Err(), lease.ErrLost) {
		t.Fatalf("Err: %v", all.Err())
	}
}
