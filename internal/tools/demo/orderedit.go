package demo

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/httpver"
	"github.com/sqlock/sqlock/versioned"
)

// Order edit: two people edit the same orders at once, each in a client
// of their own (two OS processes, each also a replica serving the API).
// Client 0 changes an order's shipping address, client 1 adds a note;
// each GETs the order, thinks for editThink, and PUTs the whole order
// back, the other's field as it read it. Naive, the handler writes what
// the client sent and the second PUT erases the first edit. With
// httpver, the PUT carries the ETag of the version read in If-Match, the
// database checks it in the UPDATE, the later client gets 412 and redoes
// its edit on a fresh GET: no edit is lost.
const (
	editOrders    = 30
	editThink     = 10 * time.Millisecond
	editAttempts  = 200
	orderEdit     = "order-edit"
	strategyIfMat = "httpver If-Match"
)

var orderEditScenario = &scenario{
	name: orderEdit,
	title: fmt.Sprintf("5. order edit — 2 clients (2 processes) edit the same %d orders over HTTP: "+
		"one the address, the other the note; each PUTs the order it read", editOrders),
	anomaly:    "lost edits",
	replicas:   2,
	goroutines: 3,
	setup: func(string) string {
		return fmt.Sprintf(`DROP TABLE IF EXISTS edit_orders, replicas;
			CREATE TABLE edit_orders (id int PRIMARY KEY, address text NOT NULL DEFAULT '',
				note text NOT NULL DEFAULT '', version bigint NOT NULL DEFAULT 1);
			INSERT INTO edit_orders (id) SELECT generate_series(1, %d);
			CREATE TABLE replicas (replica int PRIMARY KEY, addr text NOT NULL);`, editOrders)
	},
	verify: func(ctx context.Context, conn *pgx.Conn) (int, string, error) {
		var lost, orders int
		err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE address = '') + count(*) FILTER (WHERE note = ''),
			count(*) FROM edit_orders`).Scan(&lost, &orders)
		if err == nil && orders != editOrders {
			err = fmt.Errorf("%d of %d orders", orders, editOrders)
		}
		return lost, "", err
	},
	strategies: []*strategy{
		{name: "naive", run: editOverHTTP, serve: serveOrders(false)},
		{name: strategyIfMat, mustHold: true, run: editOverHTTP, serve: serveOrders(true),
			note: `GET sets kind.Read's ETag; PUT is kind.Update(w, r, id, …versioned.Update(ctx, db, orders, id, expected, …)): the If-Match version is the UPDATE's expected version, a stale PUT is 412`},
	},
}

// editedOrder is the representation the API serves and takes.
type editedOrder struct {
	Address string `json:"address"`
	Note    string `json:"note"`
}

// serveOrders starts the replica's HTTP server: GET and PUT /orders/{id}.
func serveOrders(conditional bool) func(ctx context.Context, w *replica) (func(), error) {
	return func(ctx context.Context, w *replica) (func(), error) {
		table := versioned.MustTable("edit_orders")
		kind := httpver.MustKind("order", httpver.WithCurrent(func(ctx context.Context, id string) (int64, error) {
			var v int64
			err := w.db.QueryRowContext(ctx, "SELECT version FROM edit_orders WHERE id = $1", id).Scan(&v)
			return v, err
		}))
		mux := http.NewServeMux()
		mux.HandleFunc("GET /orders/{id}", func(rw http.ResponseWriter, r *http.Request) {
			var o editedOrder
			var v int64
			err := w.db.QueryRowContext(r.Context(), "SELECT address, note, version FROM edit_orders WHERE id = $1",
				r.PathValue("id")).Scan(&o.Address, &o.Note, &v)
			if errors.Is(err, sql.ErrNoRows) {
				http.NotFound(rw, r)
				return
			} else if err != nil {
				http.Error(rw, err.Error(), http.StatusInternalServerError)
				return
			}
			if kind.Read(rw, r, r.PathValue("id"), v) {
				return
			}
			_ = json.NewEncoder(rw).Encode(o)
		})
		mux.HandleFunc("PUT /orders/{id}", func(rw http.ResponseWriter, r *http.Request) {
			id, err := strconv.Atoi(r.PathValue("id"))
			var o editedOrder
			if err == nil {
				err = json.NewDecoder(r.Body).Decode(&o)
			}
			if err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			if !conditional { // the client's If-Match is ignored: last write wins
				_, err := w.db.ExecContext(r.Context(),
					"UPDATE edit_orders SET address = $1, note = $2, version = version + 1 WHERE id = $3", o.Address, o.Note, id)
				if err != nil {
					http.Error(rw, err.Error(), http.StatusInternalServerError)
					return
				}
				rw.WriteHeader(http.StatusNoContent)
				return
			}
			_, err = kind.Update(rw, r, r.PathValue("id"), func(ctx context.Context, expected int64) (int64, error) {
				return versioned.Update(ctx, w.db, table, id, expected,
					versioned.Set("address", o.Address), versioned.Set("note", o.Note))
			})
			var answered *httpver.Error
			switch {
			case errors.As(err, &answered): // 412, 428, 404 or 400, sent
			case err != nil:
				http.Error(rw, err.Error(), http.StatusInternalServerError)
			default:
				rw.WriteHeader(http.StatusNoContent)
			}
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: mux}
		go func() { _ = srv.Serve(ln) }()
		if _, err := w.pool.Exec(ctx, "INSERT INTO replicas (replica, addr) VALUES ($1, $2)", w.replica, ln.Addr().String()); err != nil {
			srv.Close()
			return nil, err
		}
		return func() { _ = srv.Shutdown(context.Background()) }, nil
	}
}

// editOverHTTP is goroutine g of client w.replica: it edits its field of
// each order in its share. Goroutine g of both clients takes the same
// orders in the same order, so the two edits of an order overlap. Each
// client talks to the replica in its own process, so the two edits of an
// order go through different processes, and a replica that has finished
// can stop its server without cutting off the other's client.
func editOverHTTP(ctx context.Context, w *replica, g int) {
	addrs, err := replicaAddrs(ctx, w)
	if err != nil {
		w.count(0, err)
		return
	}
	for order := 1 + g; order <= editOrders; order += w.goroutines {
		w.count(editOnce(ctx, w, addrs[w.replica], order))
	}
}

// editOnce is one client's edit of one order: GET, think, PUT with the
// ETag read; after a 412, the same again on a fresh GET.
func editOnce(ctx context.Context, w *replica, addr string, order int) (outcome, error) {
	url := "http://" + addr + "/orders/" + strconv.Itoa(order)
	value := fmt.Sprintf("edited by client %d", w.replica)
	for range editAttempts {
		var o editedOrder
		status, etag, err := exchange(ctx, http.MethodGet, url, "", nil, &o)
		if err != nil || status != http.StatusOK {
			return 0, fmt.Errorf("GET order %d: %d %v", order, status, err)
		}
		time.Sleep(editThink) // the person edits the form
		if w.replica == 0 {
			o.Address = value
		} else {
			o.Note = value
		}
		status, _, err = exchange(ctx, http.MethodPut, url, etag, o, nil)
		switch {
		case err != nil:
			return 0, err
		case status == http.StatusNoContent:
			return success, nil
		case status == http.StatusPreconditionFailed:
			w.count(conflict, nil)
			w.mu.Lock()
			w.stats.Retries++
			w.mu.Unlock()
			continue
		default:
			return 0, fmt.Errorf("PUT order %d: status %d", order, status)
		}
	}
	return 0, fmt.Errorf("order %d: no edit after %d attempts", order, editAttempts)
}

// exchange sends one request and decodes a 200's JSON body into out.
func exchange(ctx context.Context, method, url, ifMatch string, in, out any) (int, string, error) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, "", err
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, "", fmt.Errorf("unreadable order %q: %w", data, err)
		}
	}
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}
