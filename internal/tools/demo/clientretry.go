package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock/idem"
)

// Client retry: the payment of scenario 1 as an HTTP API. Each of the 40
// payments has one client. Its first request reaches one replica, which
// charges, but the response is lost (the client gives up after
// lostResponse, before the provider call has even returned); the client
// retries the same request, with the same Idempotency-Key, and the load
// balancer sends it to the next replica — another OS process. Naive, the
// handler charges again; behind idem.Middleware the retry is answered 409
// while the first request runs and then gets the first response replayed,
// and each order is charged exactly once.
const (
	lostResponse  = 3 * time.Millisecond // the first attempt's client timeout
	retryBackoff  = 2 * time.Millisecond
	retryAttempts = 500
	clientRetry   = "client-retry"
	idemTable     = "demo_idem"
	strategyIdem  = "idem.Middleware"
)

var clientRetryScenario = &scenario{
	name: clientRetry,
	title: fmt.Sprintf("1b. payment, client retries — %d payments over HTTP; every client's first response is lost "+
		"and it retries the same Idempotency-Key on another replica (3 processes)", paymentOrders),
	anomaly:    "double charges",
	replicas:   3,
	goroutines: 4,
	setup: func(string) string {
		ddl, err := idem.DDL(idem.WithTable(idemTable))
		if err != nil {
			panic(err) // a constant table name
		}
		return `DROP TABLE IF EXISTS charges, replicas, ` + idemTable + `;
			CREATE TABLE charges (id bigserial PRIMARY KEY, order_id int NOT NULL, replica int NOT NULL);
			CREATE TABLE replicas (replica int PRIMARY KEY, addr text NOT NULL);
			` + ddl
	},
	verify: func(ctx context.Context, conn *pgx.Conn) (int, string, error) {
		var dup, orders, charges int
		err := conn.QueryRow(ctx, `SELECT coalesce(sum(n - 1), 0), count(*), coalesce(sum(n), 0) FROM
			(SELECT count(*) n FROM charges GROUP BY order_id) c`).Scan(&dup, &orders, &charges)
		if err == nil && orders != paymentOrders {
			err = fmt.Errorf("%d of %d orders charged", orders, paymentOrders)
		}
		return dup, fmt.Sprintf(" (%d charges)", charges), err
	},
	strategies: []*strategy{
		{name: "naive", run: payOverHTTP, serve: serveCharges(false)},
		{name: strategyIdem, mustHold: true, run: payOverHTTP, serve: serveCharges(true),
			note: `idem.Middleware(pool, idem.WithScope(customer)) around the handler; its writes join the key's transaction through idem.TxFrom[pgx.Tx]`},
	},
}

// pgxdb is what the charge handler writes with: the pool (naive) or the
// middleware's transaction.
type pgxdb interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type chargeRequest struct {
	Order int `json:"order"`
}

type chargeResponse struct {
	Order  int   `json:"order"`
	Charge int64 `json:"charge"`
}

// serveCharges starts the replica's HTTP server: POST /charges charges an
// order (the provider call, then the record of it). The server keeps
// working when the client goes away — the response is lost on the way
// back, not the request — so the handler runs on a context detached from
// the connection's.
func serveCharges(withIdem bool) func(ctx context.Context, w *replica) (func(), error) {
	return func(ctx context.Context, w *replica) (func(), error) {
		var h http.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			var req chargeRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			var db pgxdb = w.pool
			if withIdem {
				tx, ok := idem.TxFrom[pgx.Tx](r.Context())
				if !ok {
					http.Error(rw, "no idempotency transaction", http.StatusInternalServerError)
					return
				}
				db = tx
			}
			time.Sleep(providerLatency) // the payment provider
			res := chargeResponse{Order: req.Order}
			err := db.QueryRow(r.Context(), "INSERT INTO charges (order_id, replica) VALUES ($1, $2) RETURNING id",
				req.Order, w.replica).Scan(&res.Charge)
			if err != nil {
				http.Error(rw, err.Error(), http.StatusInternalServerError)
				return
			}
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(rw).Encode(res)
		})
		if withIdem {
			mw, err := idem.Middleware(w.pool, idem.WithTable(idemTable),
				idem.WithScope(func(r *http.Request) string { return r.Header.Get("X-Customer") }))
			if err != nil {
				return nil, err
			}
			h = mw(h)
		}
		inner := h
		h = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(rw, r.WithContext(context.WithoutCancel(r.Context())))
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		if _, err := w.pool.Exec(ctx, "INSERT INTO replicas (replica, addr) VALUES ($1, $2)", w.replica, ln.Addr().String()); err != nil {
			srv.Close()
			return nil, err
		}
		// Stop waits for the requests in progress: they finish their
		// charges, whatever became of their clients.
		return func() { _ = srv.Shutdown(context.Background()) }, nil
	}
}

// payOverHTTP is goroutine g of a replica as the clients of its share of
// the orders: each order's client sends attempt k to replica (order + k)
// mod n, gives up on the first after lostResponse, and retries — after a
// lost response, a 409 (in progress), a 5xx or a refused connection —
// until it gets its receipt.
func payOverHTTP(ctx context.Context, w *replica, g int) {
	addrs, err := replicaAddrs(ctx, w)
	if err != nil {
		w.count(0, err)
		return
	}
	clients := len(addrs) * w.goroutines
	for order := 1 + w.replica*w.goroutines + g; order <= paymentOrders; order += clients {
		w.count(payOnce(ctx, w, addrs, order))
	}
}

func replicaAddrs(ctx context.Context, w *replica) ([]string, error) {
	rows, err := w.pool.Query(ctx, "SELECT addr FROM replicas ORDER BY replica")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// payOnce is one order's client. With idem, the receipt it finally gets
// must name the one charge the database holds for the order.
func payOnce(ctx context.Context, w *replica, addrs []string, order int) (outcome, error) {
	body, _ := json.Marshal(chargeRequest{Order: order})
	key := "order-" + strconv.Itoa(order)
	for k := range retryAttempts {
		timeout := 10 * time.Second
		if k == 0 {
			timeout = lostResponse
		}
		status, res, err := post(ctx, addrs[(order+k)%len(addrs)], key, body, timeout)
		switch {
		case err != nil || status == http.StatusConflict || status >= 500:
			if status == http.StatusConflict {
				w.count(conflict, nil)
			}
			w.mu.Lock()
			w.stats.Retries++
			w.mu.Unlock()
			time.Sleep(retryBackoff)
			continue
		case status != http.StatusCreated:
			return 0, fmt.Errorf("order %d: status %d", order, status)
		}
		if w.pool != nil && w.strategy == strategyIdem {
			var charge int64
			if err := w.pool.QueryRow(ctx, "SELECT id FROM charges WHERE order_id = $1", order).Scan(&charge); err != nil {
				return 0, fmt.Errorf("order %d: the charge behind the receipt: %w", order, err)
			}
			if charge != res.Charge {
				return 0, fmt.Errorf("order %d: receipt names charge %d, the database holds %d", order, res.Charge, charge)
			}
		}
		return success, nil
	}
	return 0, fmt.Errorf("order %d: no receipt after %d attempts", order, retryAttempts)
}

func post(ctx context.Context, addr, key string, body []byte, timeout time.Duration) (int, chargeResponse, error) {
	var res chargeResponse
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/charges", bytes.NewReader(body))
	if err != nil {
		return 0, res, err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Customer", "customer-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, res, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, res, err
	}
	if resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(data, &res); err != nil {
			return 0, res, errors.New("unreadable receipt: " + string(data))
		}
	}
	return resp.StatusCode, res, nil
}
