package httpver_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/glebarez/sqlite"
	"github.com/jmoiron/sqlx"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/httpver"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

// The examples run on an in-memory SQLite database so that they run
// anywhere; the package's tests run the same handlers on PostgreSQL.

// exampleDB opens one in-memory SQLite database with order 42 at version 7.
func exampleDB() *sql.DB {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1) // one connection: one in-memory database
	if _, err := db.Exec(`CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL DEFAULT 'new',
		note text NOT NULL DEFAULT '', counter integer NOT NULL DEFAULT 0, version integer NOT NULL DEFAULT 1);
		INSERT INTO orders (id, version) VALUES (42, 7)`); err != nil {
		panic(err)
	}
	return db
}

// currentVersion is the kind's CurrentFunc: a 412 reads the row's version
// to send its ETag. It runs on the losing path only.
func currentVersion(db *sql.DB) httpver.CurrentFunc {
	return func(ctx context.Context, id string) (int64, error) {
		var v int64
		err := db.QueryRowContext(ctx, "SELECT version FROM orders WHERE id = ?", id).Scan(&v)
		return v, err // sql.ErrNoRows: 404
	}
}

// putHandler is PUT /orders/{id}: the edit is written at the version the
// client's If-Match names, by write.
func putHandler(kind *httpver.Kind, write func(ctx context.Context, id int64, status string, expected int64) (int64, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil {
			http.Error(w, "bad id", http.StatusBadRequest)
			return
		}
		var ed edit
		if err := json.NewDecoder(r.Body).Decode(&ed); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, err = kind.Update(w, r, r.PathValue("id"), func(ctx context.Context, expected int64) (int64, error) {
			return write(ctx, id, ed.Status, expected)
		})
		var answered *httpver.Error
		switch {
		case errors.As(err, &answered):
			return // 400, 404, 412 or 428, with a problem body
		case err != nil:
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent) // the ETag header names the new version
	})
	return mux
}

// put sends a PUT to h as a client would and prints the answer.
func put(h http.Handler, ifMatch string) {
	r := httptest.NewRequest(http.MethodPut, "/orders/42", strings.NewReader(`{"status":"paid"}`))
	if ifMatch != "" {
		r.Header.Set("If-Match", ifMatch)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("ETag"))
}

// versioned on database/sql: the If-Match version is versioned.Update's
// expected version. Two clients read version 7; the first PUT wins, the
// second is 412 with the ETag of version 8.
func ExampleKind_Update() {
	db := exampleDB()
	defer db.Close()
	orders := versioned.MustTable("orders", versioned.WithDialect(versioned.SQLite))
	kind := httpver.MustKind("order", httpver.WithCurrent(currentVersion(db)))
	h := putHandler(kind, func(ctx context.Context, id int64, status string, expected int64) (int64, error) {
		return versioned.Update(ctx, db, orders, id, expected, versioned.Set("status", status))
	})

	read := kind.ETag("42", 7) // what both clients' GET answered (Kind.Read)
	put(h, read)
	put(h, read)
	put(h, "") // no If-Match on a conditional route
	// Output:
	// 204 "order:NDI:v8"
	// 412 "order:NDI:v8"
	// 428
}

// GORM with the plugin: the expected version is set on the model before
// Updates, and the plugin's WHERE version = … does the comparison.
func ExampleKind_Update_gorm() {
	db := exampleDB()
	defer db.Close()
	orm, err := gorm.Open(sqlite.Dialector{Conn: db}, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	if err := orm.Use(gormplugin.New()); err != nil {
		panic(err)
	}
	kind := httpver.MustKind("order", httpver.WithCurrent(currentVersion(db)))
	h := putHandler(kind, func(ctx context.Context, id int64, status string, expected int64) (int64, error) {
		o := Order{ID: id, Version: expected}
		err := orm.WithContext(ctx).Model(&o).Updates(map[string]any{"status": status}).Error
		return o.Version, err // bumped by the plugin on success
	})

	read := kind.ETag("42", 7)
	put(h, read)
	put(h, read)
	put(h, "W/"+kind.ETag("42", 8)) // a weak tag never matches a write
	// Output:
	// 204 "order:NDI:v8"
	// 412 "order:NDI:v8"
	// 412 "order:NDI:v8"
}

// sqlx with sqlxhelpers: the struct carries the expected version into
// Helper.Update.
func ExampleKind_Update_sqlx() {
	db := exampleDB()
	defer db.Close()
	h, err := sqlxhelpers.New(sqlx.NewDb(db, "sqlite3"))
	if err != nil {
		panic(err)
	}
	kind := httpver.MustKind("order", httpver.WithCurrent(currentVersion(db)))
	srv := putHandler(kind, func(ctx context.Context, id int64, status string, expected int64) (int64, error) {
		o := Order{ID: id, Status: status, Version: expected}
		err := h.Update(ctx, "orders", &o, sqlxhelpers.Columns("status"))
		return o.Version, err // incremented on success
	})

	read := kind.ETag("42", 7)
	put(srv, read)
	put(srv, read)
	put(srv, `"order:NDI:v8`) // malformed: unterminated
	// Output:
	// 204 "order:NDI:v8"
	// 412 "order:NDI:v8"
	// 400
}

// A GET sets the ETag of the version it read, and answers 304 when the
// client's If-None-Match already names it.
func ExampleKind_Read() {
	kind := httpver.MustKind("order")
	get := func(ifNoneMatch string) {
		r := httptest.NewRequest(http.MethodGet, "/orders/42", nil)
		if ifNoneMatch != "" {
			r.Header.Set("If-None-Match", ifNoneMatch)
		}
		w := httptest.NewRecorder()
		if !kind.Read(w, r, "42", 7) { // version 7: from the row the handler read
			w.WriteHeader(http.StatusOK) // … and the representation
		}
		fmt.Println(w.Code, w.Header().Get("ETag"))
	}
	get("")
	get(kind.ETag("42", 7))
	// Output:
	// 200 "order:NDI:v7"
	// 304 "order:NDI:v7"
}
