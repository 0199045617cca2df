package idem_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/idem"
)

// Worker processes: the test binary run again with childEnv set to a role.
// They read IDEM_DSN, IDEM_KEY, IDEM_PROC and report on stdout.
func runChild(role string) int {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("IDEM_DSN"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer pool.Close()
	switch role {
	case "once-func":
		return onceChild(func(goroutines int) []string { return onceFunc(ctx, pool, goroutines) })
	case "once-http":
		return onceChild(func(goroutines int) []string { return onceHTTP(pool, goroutines) })
	case "killed":
		return killedChild(ctx, pool)
	case "phased":
		return phasedChild(ctx, pool)
	}
	fmt.Println("unknown role", role)
	return 2
}

// onceChild says READY, waits for a line on stdin (so that every process
// starts at once), runs IDEM_GOROUTINES identical requests through run and
// prints one "RESULT <result>" line per request.
func onceChild(run func(goroutines int) []string) int {
	n, _ := strconv.Atoi(os.Getenv("IDEM_GOROUTINES"))
	fmt.Println("READY")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println(err)
		return 2
	}
	for _, r := range run(n) {
		fmt.Println("RESULT " + r)
	}
	return 0
}

// onceFunc runs idem.Do with IDEM_KEY from n goroutines; fn inserts one
// effects row naming this process and returns its id.
func onceFunc(ctx context.Context, pool *pgxpool.Pool, n int) []string {
	out := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				v, err := idem.Do(ctx, tx, "tenant", os.Getenv("IDEM_KEY"), []byte("fp"), func(ctx context.Context) (receipt, error) {
					var r receipt
					r.Order = os.Getenv("IDEM_PROC")
					err := tx.QueryRow(ctx, `INSERT INTO effects (key, who) VALUES ($1, $2) RETURNING id, clock_timestamp()`,
						os.Getenv("IDEM_KEY"), r.Order).Scan(&r.Charge, &r.At)
					return r, err
				})
				if err != nil {
					return err
				}
				b, err := json.Marshal(v)
				out[i] = string(b)
				return err
			})
			if err != nil {
				out[i] = "error: " + err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// onceHTTP serves chargeHandler behind the middleware (waiting mode) and
// sends it n identical requests at once.
func onceHTTP(pool *pgxpool.Pool, n int) []string {
	mw, err := idem.Middleware(pool, idem.WithWait(), idem.WithScope(func(*http.Request) string { return "" }))
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var runs = new(countingRuns)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.add()
		tx, _ := idem.TxFrom[pgx.Tx](r.Context())
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO effects (key, who) VALUES ($1, $2) RETURNING id`,
			os.Getenv("IDEM_KEY"), os.Getenv("IDEM_PROC")).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"proc":%q}`, id, os.Getenv("IDEM_PROC"))
	})))
	defer srv.Close()
	out := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader("charge 10 EUR"))
			req.Header.Set("Idempotency-Key", os.Getenv("IDEM_KEY"))
			res, err := srv.Client().Do(req)
			if err != nil {
				out[i] = "error: " + err.Error()
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			out[i] = fmt.Sprintf("%d %s %s", res.StatusCode, res.Header.Get("Content-Type"), b)
		}()
	}
	wg.Wait()
	return out
}

type countingRuns struct {
	mu sync.Mutex
	n  int
}

func (c *countingRuns) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }

// killedChild claims IDEM_KEY in a transaction and, inside fn, after its
// write, prints "INSIDE <backend pid>" and blocks until it is killed.
func killedChild(ctx context.Context, pool *pgxpool.Pool) int {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := idem.Do(ctx, tx, "", os.Getenv("IDEM_KEY"), nil, func(ctx context.Context) (int, error) {
			var pid int
			if err := tx.QueryRow(ctx, `INSERT INTO effects (key, who) VALUES ($1, 'killed') RETURNING pg_backend_pid()`,
				os.Getenv("IDEM_KEY")).Scan(&pid); err != nil {
				return 0, err
			}
			fmt.Printf("INSIDE %d\n", pid)
			select {} // killed here
		})
		return err
	})
	fmt.Println("error:", err)
	return 2
}
