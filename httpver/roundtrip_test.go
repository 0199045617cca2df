package httpver_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sqlock/sqlock/httpver"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/versioned"
)

// countingSQL is a one-connection *sql.DB on the harness's counting
// driver: its count is the round trips on the wire.
func countingSQL(t *testing.T, dsn string) (*sql.DB, *matrix.RoundTrips) {
	t.Helper()
	var rt matrix.RoundTrips
	db, err := matrix.OpenSQL(dsn, &rt)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	t.Cleanup(func() { db.Close() })
	return db, &rt
}

// A conditional PUT that wins costs the round trips of versioned.Update
// without HTTP: the If-Match version goes into the UPDATE, nothing is read
// first. A losing one costs one more (the read of the current version for
// the 412's ETag), and so does a bare stale versioned.Update followed by
// the read a hand-written handler would need for it.
func TestRoundTripsEqualTheVersionedWrite(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t, false)
	e.seed(1, 1)
	db, writes := countingSQL(t, e.pg.DSN)
	e.db = db
	e.kind = httpver.MustKind("order", httpver.WithCurrent(e.current))
	h := e.handler("versioned")
	count := func(f func()) int64 {
		before := writes.Load()
		f()
		return writes.Load() - before
	}
	put := func(ifMatch string) int {
		r := httptest.NewRequestWithContext(ctx, http.MethodPut, "/orders/1", jsonBody(edit{Note: "n"}))
		r.Header.Set("If-Match", ifMatch)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	// Warm the connection and pgx's statement cache (the first run of a
	// statement prepares it), so that no count includes a start-up.
	if _, err := versioned.Update(ctx, db, e.table, 1, int64(1), versioned.Set("note", "n")); err != nil {
		t.Fatal(err)
	}
	if code := put(e.kind.ETag("1", 1)); code != http.StatusPreconditionFailed {
		t.Fatalf("warm-up: %d", code)
	}
	direct := count(func() {
		if _, err := versioned.Update(ctx, db, e.table, 1, int64(2), versioned.Set("note", "n")); err != nil {
			t.Fatal(err)
		}
	})
	var code int
	viaHTTP := count(func() { code = put(e.kind.ETag("1", 3)) })
	if code != http.StatusOK || viaHTTP != direct || direct < 1 {
		t.Fatalf("winning PUT: %d in %d round trips; versioned.Update alone: %d", code, viaHTTP, direct)
	}
	staleDirect := count(func() {
		if _, err := versioned.Update(ctx, db, e.table, 1, int64(2), versioned.Set("note", "n")); err == nil {
			t.Fatal("stale write succeeded")
		}
	})
	staleHTTP := count(func() { code = put(e.kind.ETag("1", 2)) })
	if code != http.StatusPreconditionFailed || staleHTTP != staleDirect+1 {
		t.Fatalf("losing PUT: %d in %d round trips; a stale versioned.Update: %d (want one more: the current version)", code, staleHTTP, staleDirect)
	}
	t.Logf("round trips: win %d (versioned.Update %d), lose %d", viaHTTP, direct, staleHTTP)
}
