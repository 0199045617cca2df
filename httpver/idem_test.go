package httpver_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sqlock/sqlock/httpver"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/versioned"
)

// Behind idem.Middleware a PUT whose response was lost and that the client
// sends again — same Idempotency-Key, same If-Match, now stale because the
// first attempt wrote — gets the first answer replayed, ETag included,
// not a 412 against its own success. A different key with the same stale
// If-Match is a new request and gets the 412.
func TestIdemReplaysTheFirstAnswer(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t, false)
	ddl, err := idem.DDL()
	if err != nil {
		t.Fatal(err)
	}
	e.pg.Exec(ddl)
	e.seed(1, 7)
	put := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idem.TxFrom[*sql.Tx](r.Context()) // the write joins the key's transaction
		if !ok {
			http.Error(w, "no idempotency transaction", http.StatusInternalServerError)
			return
		}
		id := r.PathValue("id")
		_, err := e.kind.Update(w, r, id, func(ctx2 context.Context, expected int64) (int64, error) {
			n, _ := strconv.ParseInt(id, 10, 64)
			return versioned.Update(ctx2, tx, e.table, n, expected, versioned.Set("note", "paid"))
		})
		var answered *httpver.Error
		if errors.As(err, &answered) {
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mw, err := idem.Middleware(e.db, idem.WithMethods(http.MethodPut),
		idem.WithScope(func(r *http.Request) string { return "client-1" }))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /orders/{id}", mw(put))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := &http.Client{}
	v7, v8 := e.kind.ETag("1", 7), e.kind.ETag("1", 8)

	first := do(t, ctx, c, http.MethodPut, srv.URL+"/orders/1", edit{}, "If-Match", v7, "Idempotency-Key", "k1")
	if first.status != http.StatusOK || first.etag != v8 {
		t.Fatalf("first PUT: %d ETag %q %s, want 200 %s", first.status, first.etag, first.body, v8)
	}
	retry := do(t, ctx, c, http.MethodPut, srv.URL+"/orders/1", edit{}, "If-Match", v7, "Idempotency-Key", "k1")
	if retry.status != http.StatusOK || retry.etag != v8 {
		t.Fatalf("retried PUT: %d ETag %q %s, want the first answer replayed: 200 %s", retry.status, retry.etag, retry.body, v8)
	}
	other := do(t, ctx, c, http.MethodPut, srv.URL+"/orders/1", edit{}, "If-Match", v7, "Idempotency-Key", "k2")
	if other.status != http.StatusPreconditionFailed || other.etag != v8 {
		t.Fatalf("new key, stale If-Match: %d ETag %q, want 412 %s", other.status, other.etag, v8)
	}
	if row := e.row(1); row.Version != 8 {
		t.Fatalf("row at version %d, want 8: written exactly once", row.Version)
	}
}
