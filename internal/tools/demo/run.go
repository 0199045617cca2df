package demo

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/keynames"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/sqlxhelpers"
)

// Config is what the demo command passes in.
type Config struct {
	DSN       string   // an existing database; empty starts a throwaway cluster
	Scenarios []string // names to run; empty runs all
	Out       io.Writer
	Progress  io.Writer // a progress line, rewritten in place on a terminal
	// Rows, when set, receives every result row (for tests).
	Rows func(scenario, strategy string, s Stats, anomalies int)
	// paused, when set, receives every row of the paused-holder scenario
	// (for tests).
	paused func(pausedRow)
}

// Run is the coordinator: it runs every scenario and prints a table each.
func Run(ctx context.Context, cfg Config) error {
	start := time.Now()
	p := newProgress(cfg.Progress)
	dsn := cfg.DSN
	if dsn == "" {
		p.printf("starting a throwaway PostgreSQL…")
		c, err := pgtest.StartCluster(ctx, pgtest.Options{Settings: map[string]string{"max_connections": "400"}})
		if err != nil {
			return err
		}
		defer c.Close()
		dsn = pgtest.WithDatabase(c.AdminDSN(), "postgres")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := nameKeys(ctx, dsn); err != nil {
		return err
	}
	total := 0
	for _, sc := range scenarios {
		if selected(cfg.Scenarios, sc.name) {
			total += len(sc.strategies)
		}
	}
	runsPaused := selected(cfg.Scenarios, pausedName)
	if runsPaused {
		total += len(pausedStrategies)
	}
	if total == 0 {
		return fmt.Errorf("no scenario matches %v (have %s)", cfg.Scenarios, scenarioNames())
	}
	done := 0
	for _, sc := range scenarios {
		if !selected(cfg.Scenarios, sc.name) {
			continue
		}
		var rows []row
		for _, st := range sc.strategies {
			done++
			p.printf("[%d/%d] %s: %s (%d processes × %d goroutines)…",
				done, total, sc.name, st.name, sc.replicas, sc.goroutines)
			r, err := runOne(ctx, exe, dsn, sc, st)
			if err != nil {
				p.done()
				return fmt.Errorf("%s/%s: %w", sc.name, st.name, err)
			}
			rows = append(rows, r)
			if cfg.Rows != nil {
				cfg.Rows(sc.name, st.name, r.stats, r.anomaly)
			}
		}
		p.done()
		printTable(cfg.Out, sc, rows)
		for i, st := range sc.strategies {
			if st.mustHold && rows[i].anomaly != 0 {
				return fmt.Errorf("%s/%s: %d %s — the mechanism failed", sc.name, st.name, rows[i].anomaly, sc.anomaly)
			}
		}
	}
	if runsPaused {
		rows, err := runPaused(ctx, exe, dsn, p, &done, total, cfg.paused)
		p.done()
		if err != nil {
			return err
		}
		printPaused(cfg.Out, rows)
	}
	fmt.Fprintf(cfg.Out, "demo finished in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// nameKeys records the names of the demo's keys in the table that
// advisory.WithKeyNames writes and `sqlock locks` reads, so that the
// txlock strategies' locks are named there too: txlock has no Locker of
// its own to record them.
func nameKeys(ctx context.Context, dsn string) error {
	keys := []advisory.Key{seatKey, productKey}
	for order := 1; order <= paymentOrders; order++ {
		keys = append(keys, paymentKey(order))
	}
	var vals []int64
	var names []string
	for _, k := range keys {
		v, _ := k.Int64()
		vals, names = append(vals, v), append(names, k.Name())
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, keynames.DDL)
	if err == nil {
		_, err = conn.Exec(ctx, `INSERT INTO `+keynames.Table+` (key, name)
			SELECT * FROM unnest($1::bigint[], $2::text[]) ON CONFLICT (key) DO NOTHING`, vals, names)
	}
	if err != nil {
		return fmt.Errorf("recording key names: %w", err)
	}
	return nil
}

func selected(names []string, name string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

func scenarioNames() string {
	var names []string
	for _, sc := range scenarios {
		names = append(names, sc.name)
	}
	return strings.Join(append(names, pausedName), ", ")
}

type row struct {
	strategy string
	stats    Stats
	anomaly  int
	detail   string
}

// runOne prepares the tables, starts the replicas, releases them together
// and asks the database what happened.
func runOne(ctx context.Context, exe, dsn string, sc *scenario, st *strategy) (row, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return row{}, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sc.setup(st.name)); err != nil {
		return row{}, fmt.Errorf("setup: %w", err)
	}
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Scanner
	}
	procs := make([]proc, sc.replicas)
	defer func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	for i := range procs {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), workerEnv+"="+sc.name+"/"+st.name+"/"+strconv.Itoa(i), dsnEnv+"="+dsn)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return row{}, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return row{}, err
		}
		if err := cmd.Start(); err != nil {
			return row{}, err
		}
		procs[i] = proc{cmd, in, bufio.NewScanner(out)}
		procs[i].out.Buffer(make([]byte, 1<<20), 64<<20)
	}
	for i, p := range procs { // every replica connected and ready
		if !p.out.Scan() || p.out.Text() != "ready" {
			return row{}, fmt.Errorf("replica %d did not start: %v", i, p.out.Err())
		}
	}
	for _, p := range procs { // then release them together
		io.WriteString(p.in, "go\n")
	}
	var total Stats
	for i, p := range procs {
		if !p.out.Scan() {
			return row{}, fmt.Errorf("replica %d reported nothing", i)
		}
		var s Stats
		if err := json.Unmarshal(p.out.Bytes(), &s); err != nil {
			return row{}, fmt.Errorf("replica %d: %w", i, err)
		}
		total.add(s)
		p.in.Close()
		if err := p.cmd.Wait(); err != nil {
			return row{}, fmt.Errorf("replica %d: %w", i, err)
		}
	}
	anomaly, detail, err := sc.verify(ctx, conn)
	if err != nil {
		return row{}, fmt.Errorf("verify: %w", err)
	}
	return row{strategy: st.name, stats: total, anomaly: anomaly, detail: detail}, nil
}

func printTable(w io.Writer, sc *scenario, rows []row) {
	fmt.Fprintf(w, "\n%s\n", sc.title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "strategy\tok\tskipped\t%s\tconflicts\tretries\terrors\twait p50\twait p99\thold p50\thold p99\tops/s\t\n", sc.anomaly)
	for _, r := range rows {
		s := r.stats
		ops := float64(s.Successes+s.Skipped) / (float64(s.Elapsed) / 1e9)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f\t\n",
			r.strategy, s.Successes, s.Skipped, anomalyText(r), s.Conflicts, s.Retries, s.Errors,
			dur(percentile(s.Waits, 0.5)), dur(percentile(s.Waits, 0.99)),
			dur(percentile(s.Holds, 0.5)), dur(percentile(s.Holds, 0.99)), ops)
	}
	tw.Flush()
	for _, st := range sc.strategies {
		if st.note != "" {
			fmt.Fprintf(w, "  %s: %s\n", st.name, st.note)
		}
	}
	for _, r := range rows {
		if r.stats.ErrSample != "" {
			fmt.Fprintf(w, "  %s: first error: %s\n", r.strategy, r.stats.ErrSample)
		}
	}
}

func anomalyText(r row) string {
	if r.anomaly == 0 {
		return "0" + r.detail
	}
	return fmt.Sprintf("%d !!", r.anomaly) + r.detail
}

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
}

// The coordinator starts replicas as this same executable with these
// variables set; MaybeWorker recognises them.
const (
	workerEnv = "SQLOCK_DEMO_WORKER" // scenario/strategy/replica
	dsnEnv    = "SQLOCK_DEMO_DSN"
)

// MaybeWorker turns this process into a replica when the coordinator started
// it (the command's main and the tests' TestMain call it first); it returns
// only when the process is not a replica.
func MaybeWorker() {
	spec := os.Getenv(workerEnv)
	if spec == "" {
		return
	}
	parts := strings.Split(spec, "/")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "demo worker: bad %s=%q\n", workerEnv, spec)
		os.Exit(2)
	}
	replica, _ := strconv.Atoi(parts[2])
	cfg := workerConfig{DSN: os.Getenv(dsnEnv), Scenario: parts[0], Strategy: parts[1], Replica: replica}
	run := worker
	if cfg.Scenario == pausedName {
		run = pausedWorker
	}
	if err := run(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "demo worker %s: %v\n", spec, err)
		os.Exit(1)
	}
	os.Exit(0)
}

type workerConfig struct {
	DSN, Scenario, Strategy string
	Replica                 int
}

// worker is a replica process: it connects, says "ready", waits for "go" on
// stdin, does its share of the scenario, and prints its Stats as JSON.
func worker(ctx context.Context, cfg workerConfig, in io.Reader, out io.Writer) error {
	sc := findScenario(cfg.Scenario)
	if sc == nil {
		return fmt.Errorf("unknown scenario %q", cfg.Scenario)
	}
	st := sc.strategy(cfg.Strategy)
	if st == nil {
		return fmt.Errorf("unknown strategy %q", cfg.Strategy)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(sc.goroutines + 4)
	// sqlock locks beside the demo shows which replica holds and waits.
	pcfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("demo-%s-%d", sc.name, cfg.Replica)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	db.SetMaxOpenConns(sc.goroutines + 4)
	if err := warm(ctx, pool, sc.goroutines); err != nil {
		return err
	}
	rec := &recorder{}
	w := &replica{db: db, pool: pool, rec: rec, replica: cfg.Replica, goroutines: sc.goroutines, strategy: st.name,
		locker: advisory.New(db, advisory.WithObserver(rec), advisory.WithTimeout(30*time.Second),
			advisory.WithKeyNames())}
	if err := w.openORMs(db); err != nil {
		return err
	}
	stop := func() {}
	if st.serve != nil {
		if stop, err = st.serve(ctx, w); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "ready")
	if line, err := bufio.NewReader(in).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < sc.goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.run(ctx, w, g)
		}()
	}
	wg.Wait()
	stop()
	s := w.stats
	s.Elapsed = int64(time.Since(start))
	s.Retries += w.rec.retries
	s.Conflicts += w.rec.stale // the stale writes gormplugin and sqlxhelpers reported
	s.Waits, s.Holds = w.rec.waits, w.rec.holds
	return json.NewEncoder(out).Encode(s)
}

// warm opens a connection per goroutine before the replica says it is
// ready, as a running service has them: otherwise the first goroutines to
// run would finish while the others still connect (tens of milliseconds on
// a busy machine, longer than the race windows), and whether the demo shows
// a race would depend on the machine's speed. database/sql's connections
// on this pool (stdlib.OpenDBFromPool) take the warm ones.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// replica is one replica process's shared state.
type replica struct {
	db         *sql.DB
	pool       *pgxpool.Pool
	rec        *recorder
	locker     *advisory.Locker
	orm        *gorm.DB // with gormplugin registered
	sqlx       *sqlx.DB
	sqlxh      *sqlxhelpers.Helper
	replica    int
	goroutines int
	strategy   string

	mu    sync.Mutex
	stats Stats
}

// openORMs opens GORM, with the plugin registered, and sqlx on the
// replica's pool, as a service would at start-up.
func (w *replica) openORMs(db *sql.DB) error {
	// GORM's default logger writes to stdout, which is the replica's report.
	orm, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if err := orm.Use(gormplugin.New(gormplugin.WithObserver(w.rec))); err != nil {
		return err
	}
	w.orm = orm
	w.sqlx = sqlx.NewDb(db, "pgx")
	w.sqlxh, err = sqlxhelpers.New(w.sqlx, sqlxhelpers.WithObserver(w.rec))
	return err
}

// dbtx is what the scenario steps need: *sql.DB and *sql.Tx both have it.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type outcome uint8

const (
	success outcome = iota
	skipped
	conflict
)

func (w *replica) count(o outcome, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.stats.Errors++
		if w.stats.ErrSample == "" {
			w.stats.ErrSample = err.Error()
		}
		return
	}
	switch o {
	case success:
		w.stats.Successes++
	case skipped:
		w.stats.Skipped++
	case conflict:
		w.stats.Conflicts++
	}
}

// progress writes one status line: rewritten in place on a terminal, plain
// lines otherwise (CI logs).
type progress struct {
	w   io.Writer
	tty bool
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{w: w, tty: tty}
}

func (p *progress) printf(format string, args ...any) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
		return
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
