package httpver_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/httpver"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Order is the resource every test serves: one struct for GORM and sqlx.
type Order struct {
	ID      int64  `db:"id" json:"id"`
	Status  string `db:"status" json:"status"`
	Note    string `db:"note" json:"note"`
	Counter int64  `db:"counter" json:"counter"`
	Version int64  `db:"version" json:"version" gorm:"not null;default:1" lock:"version"`
}

const schema = `CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'new',
	note text NOT NULL DEFAULT '', counter bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 1)`

// edit is a PUT's body: the fields a client sets.
type edit struct {
	Status  string `json:"status"`
	Note    string `json:"note"`
	Counter int64  `json:"counter"`
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// paths are the three ways a service writes a versioned row; each makes a
// WriteFunc for an order's edit.
var paths = []string{"versioned", "gorm", "sqlx"}

type env struct {
	t     testing.TB
	pg    *pgtest.DB
	db    *sql.DB
	orm   *gorm.DB
	h     *sqlxhelpers.Helper
	table *versioned.Table
	kind  *httpver.Kind
}

func newEnv(t testing.TB, probe bool) *env {
	pg := pgtest.New(t)
	pg.Exec(schema)
	e := &env{t: t, pg: pg, db: pg.SQL()}
	e.init(probe)
	return e
}

func (e *env) init(probe bool) {
	var opts []versioned.Option
	var gopts []gormplugin.Option
	if probe {
		opts = append(opts, versioned.WithProbe())
		gopts = append(gopts, gormplugin.WithProbe())
	}
	e.table = versioned.MustTable("orders", opts...)
	orm, err := gorm.Open(postgres.New(postgres.Config{Conn: e.db}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := orm.Use(gormplugin.New(gopts...)); err != nil {
		e.t.Fatal(err)
	}
	e.orm = orm
	if e.h, err = sqlxhelpers.New(sqlx.NewDb(e.db, "pgx")); err != nil {
		e.t.Fatal(err)
	}
	e.kind = httpver.MustKind("order", httpver.WithCurrent(e.current))
}

// current is the kind's CurrentFunc: one SELECT, on the losing path only.
func (e *env) current(ctx context.Context, id string) (int64, error) {
	var v int64
	err := e.db.QueryRowContext(ctx, "SELECT version FROM orders WHERE id = $1", id).Scan(&v)
	return v, err
}

func (e *env) seed(id, version int64) {
	e.pg.Exec("INSERT INTO orders (id, version) VALUES ($1, $2)", id, version)
}

func (e *env) row(id int64) Order {
	e.t.Helper()
	var o Order
	err := e.db.QueryRow("SELECT id, status, note, counter, version FROM orders WHERE id = $1", id).
		Scan(&o.ID, &o.Status, &o.Note, &o.Counter, &o.Version)
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

// write returns the WriteFunc of path for order id set to ed.
func (e *env) write(path string, id int64, ed edit) httpver.WriteFunc {
	return func(ctx context.Context, expected int64) (int64, error) {
		switch path {
		case "gorm":
			o := Order{ID: id, Version: expected} // the expected version set before Updates
			err := e.orm.WithContext(ctx).Model(&o).
				Updates(map[string]any{"status": ed.Status, "note": ed.Note, "counter": ed.Counter}).Error
			return o.Version, err
		case "sqlx":
			o := Order{ID: id, Status: ed.Status, Note: ed.Note, Counter: ed.Counter, Version: expected}
			err := e.h.Update(ctx, "orders", &o, sqlxhelpers.Columns("status", "note", "counter"))
			return o.Version, err
		default:
			return versioned.Update(ctx, e.db, e.table, id, expected,
				versioned.Set("status", ed.Status), versioned.Set("note", ed.Note), versioned.Set("counter", ed.Counter))
		}
	}
}

// handler serves GET and PUT /orders/{id}, writing through path.
func (e *env) handler(path string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		var o Order
		err := e.db.QueryRowContext(r.Context(), "SELECT id, status, note, counter, version FROM orders WHERE id = $1",
			r.PathValue("id")).Scan(&o.ID, &o.Status, &o.Note, &o.Counter, &o.Version)
		if errors.Is(err, sql.ErrNoRows) {
			http.NotFound(w, r)
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if e.kind.Read(w, r, r.PathValue("id"), o.Version) {
			return
		}
		_ = json.NewEncoder(w).Encode(o)
	})
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
		v, err := e.kind.Update(w, r, r.PathValue("id"), e.write(path, id, ed))
		var answered *httpver.Error
		if errors.As(err, &answered) {
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(Order{ID: id, Status: ed.Status, Note: ed.Note, Counter: ed.Counter, Version: v})
	})
	return mux
}

// response is what a client saw.
type response struct {
	status  int
	etag    string
	body    []byte
	problem map[string]any
}

func do(t testing.TB, ctx context.Context, c *http.Client, method, url string, body any, header ...string) response {
	t.Helper()
	r, err := send(ctx, c, method, url, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is do for goroutines other than the test's: it returns its error.
func send(ctx context.Context, c *http.Client, method, url string, body any, header ...string) (response, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	r := response{status: resp.StatusCode, etag: resp.Header.Get("ETag"), body: b}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			return r, fmt.Errorf("problem body %q: %w", b, err)
		}
	}
	return r, nil
}

// serve starts path's handler on a loopback httptest server.
func (e *env) serve(path string) string {
	srv := httptest.NewServer(e.handler(path))
	e.t.Cleanup(srv.Close)
	return srv.URL
}

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("body %q: %w", b, err)
	}
	return nil
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}
