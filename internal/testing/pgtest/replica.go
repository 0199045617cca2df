package pgtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// standbyName is the standby's application_name and replication slot; the
// primary's synchronous_standby_names names it.
const standbyName = "standby"

// replication are the settings both servers of a ReplicaSet run with.
var replication = map[string]string{
	"wal_level":             "replica",
	"max_wal_senders":       "5",
	"max_replication_slots": "5",
	"hot_standby":           "on",
}

// ReplicaOptions tune a primary and standby started by StartReplicaSet.
type ReplicaOptions struct {
	// Synchronous makes the standby synchronous: the primary runs with
	// synchronous_standby_names naming it and synchronous_commit=on, so a
	// commit returns only once the standby has written its WAL to disk
	// (enough for a promoted standby to have every commit a client saw
	// return; remote_apply would also make it visible to readers of the
	// standby before the commit returns, which failover does not need).
	// Otherwise replication is asynchronous: a commit returns once the
	// primary has it, and the standby may lag.
	Synchronous bool
	// Settings are passed to both servers, after the defaults of
	// StartCluster and the replication settings.
	Settings map[string]string
}

// ReplicaSet is a throwaway primary and a streaming standby made from it
// with pg_basebackup. The standby's directory is inside the primary's, and
// each server has its own watchdog, so every exit path of the test binary
// removes both.
type ReplicaSet struct {
	Primary *Cluster
	Standby *Cluster
	sync    bool

	mu       sync.Mutex
	promoted bool
}

// ErrNoBaseBackup is returned when the PostgreSQL server binaries were found
// without pg_basebackup next to them.
var ErrNoBaseBackup = errors.New("pgtest: no pg_basebackup next to the server binaries: install the full server package (apt-get install -y postgresql)")

// findBaseBackup returns pg_basebackup of the same installation as the
// server binaries in bin (following a symlinked postgres), else from PATH.
func findBaseBackup(bin string) (string, error) {
	dirs := []string{bin}
	if p, err := filepath.EvalSymlinks(filepath.Join(bin, "postgres")); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, "pg_basebackup"); isFile(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pg_basebackup"); err == nil {
		return p, nil
	}
	return "", ErrNoBaseBackup
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// NewReplicaSet starts a primary and a streaming standby for one test,
// closed when the test ends. It fails the test (never skips) when they
// cannot be started.
func NewReplicaSet(tb testing.TB, opts ReplicaOptions) *ReplicaSet {
	tb.Helper()
	r, err := StartReplicaSet(context.Background(), opts)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// StartReplicaSet starts a primary (StartCluster, with replication
// enabled), takes a base backup of it with a replication slot, and starts
// the backup as a hot standby streaming from the primary on its own free
// port. It returns once the standby streams (and, when synchronous, is the
// primary's synchronous standby).
func StartReplicaSet(ctx context.Context, opts ReplicaOptions) (*ReplicaSet, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	basebackup, err := findBaseBackup(bin)
	if err != nil {
		return nil, err
	}
	primarySettings := maps.Clone(replication)
	if opts.Synchronous {
		primarySettings["synchronous_standby_names"] = standbyName
		primarySettings["synchronous_commit"] = "on"
	}
	for k, v := range opts.Settings {
		primarySettings[k] = v
	}
	primary, err := StartCluster(ctx, Options{Settings: primarySettings})
	if err != nil {
		return nil, err
	}
	standby, err := startStandby(ctx, bin, basebackup, primary, opts)
	if err != nil {
		primary.Close()
		return nil, err
	}
	r := &ReplicaSet{Primary: primary, Standby: standby, sync: opts.Synchronous}
	if err := r.waitStreaming(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// startStandby makes a standby of primary in primary's directory (so the
// primary's watchdog removes it too, even if the test binary dies during
// the base backup).
func startStandby(ctx context.Context, bin, basebackupBin string, primary *Cluster, opts ReplicaOptions) (*Cluster, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before postgres binds it
		dir := filepath.Join(primary.dir, "standby"+strconv.Itoa(attempt))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
		if err := serverproc.Own(cred, dir); err != nil {
			return nil, err
		}
		data := filepath.Join(dir, "data")
		if attempt == 0 {
			// -C -S: a physical slot keeps the primary's WAL until the standby has it.
			lastErr = basebackup(ctx, basebackupBin, cred, dir, primary.port, "-C", "-S", standbyName)
		} else {
			lastErr = basebackup(ctx, basebackupBin, cred, dir, primary.port)
		}
		if lastErr != nil {
			return nil, lastErr
		}
		var c *Cluster
		if c, lastErr = spawnStandby(ctx, bin, cred, dir, data, primary.port, opts); lastErr == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func basebackup(ctx context.Context, bin string, cred *syscall.Credential, dir string, port int, extra ...string) error {
	args := append([]string{"-D", filepath.Join(dir, "data"), "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-U", "postgres", "-X", "stream", "-c", "fast", "-R", "--no-sync"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: pg_basebackup: %w\n%s", err, out)
	}
	return nil
}

func spawnStandby(ctx context.Context, bin string, cred *syscall.Credential, dir, data string, primaryPort int,
	opts ReplicaOptions) (*Cluster, error) {
	port, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	settings := serverSettings(dir, replication, map[string]string{
		// Reported to the primary at once, so a synchronous commit waits
		// no longer than the write.
		"wal_receiver_status_interval": "1s",
		"primary_conninfo": fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s",
			primaryPort, standbyName),
		"primary_slot_name": standbyName,
	}, opts.Settings)
	// The standby, once promoted, has no standby of its own: it must not
	// wait for one.
	settings["synchronous_standby_names"] = ""
	settings["port"] = strconv.Itoa(port)
	return spawn(ctx, bin, data, dir, port, settings, cred)
}

// waitStreaming waits until the primary reports the standby streaming
// (and, when synchronous, as its synchronous standby).
func (r *ReplicaSet) waitStreaming(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.Primary.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	want := "async"
	if r.sync {
		want = "sync"
	}
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2`, standbyName, want).Scan(&n)
		if err != nil {
			return fmt.Errorf("pgtest: standby: %w", err)
		}
		if n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the standby did not stream (%s) in time; its log: %s", want, r.Standby.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Synchronous reports whether the standby is synchronous.
func (r *ReplicaSet) Synchronous() bool { return r.sync }

// DSN is a connection string for database on whichever of the two servers
// accepts writes: both hosts, primary first, with
// target_session_attrs=read-write (pgx tries them in order and keeps the
// first that is not in recovery). A pool on it reconnects to the standby
// once it is promoted.
func (r *ReplicaSet) DSN(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		r.Primary.port, r.Standby.port, database)
}

// NewDB creates a database on the primary, waits until the standby has
// it, and returns it with DSN set to r.DSN (so pools follow a failover).
// Its Cluster is the primary. Pools opened through it are closed when the
// test ends; the database goes with the servers.
func (r *ReplicaSet) NewDB(tb testing.TB) *DB {
	tb.Helper()
	ctx := context.Background()
	name, err := r.Primary.CreateDatabase(ctx)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if err := r.WaitReplay(ctx); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	d := &DB{Cluster: r.Primary, Name: name, DSN: r.DSN(name), tb: tb}
	tb.Cleanup(func() {
		if d.pool != nil {
			d.pool.Close()
		}
		if d.sql != nil {
			d.sql.Close()
		}
	})
	return d
}

// WaitReplay waits until the standby has replayed all the WAL the primary
// has written so far (its writes are then visible on the standby).
func (r *ReplicaSet) WaitReplay(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lsn string
	if err := queryOne(ctx, r.Primary.adminDSN, `SELECT pg_current_wal_lsn()::text`, &lsn); err != nil {
		return fmt.Errorf("pgtest: primary LSN: %w", err)
	}
	conn, err := pgx.Connect(ctx, r.Standby.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, true)`, lsn).Scan(&done); err != nil {
			return fmt.Errorf("pgtest: standby replay: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the standby did not replay up to %s in time", lsn)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func queryOne(ctx context.Context, dsn, sql string, dest any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql).Scan(dest)
}

// Lag is how far, in bytes, the WAL the standby has confirmed flushing is
// behind the WAL the primary has written, now: what a hard stop of the
// primary would lose on an asynchronous standby.
func (r *ReplicaSet) Lag(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.Primary.adminDSN)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var lag int64
	err = conn.QueryRow(ctx, `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)), 0)::bigint
		FROM pg_stat_replication WHERE application_name = $1`, standbyName).Scan(&lag)
	return lag, err
}

// KillPrimary stops the primary hard — SIGQUIT, PostgreSQL's immediate
// shutdown (pg_ctl stop -m immediate): every backend and the WAL sender
// exit at once, clients' connections break, nothing more is sent to the
// standby — and waits until it has exited. The primary is not started
// again.
func (r *ReplicaSet) KillPrimary() error { return r.Primary.Kill() }

// Promote promotes the standby (pg_promote, waiting for the end of
// recovery) and returns once it accepts writes.
func (r *ReplicaSet) Promote(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.promoted {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var ok bool
	if err := queryOne(ctx, r.Standby.adminDSN, `SELECT pg_promote(true, 60)`, &ok); err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	if !ok {
		return fmt.Errorf("pgtest: promote: pg_promote returned false; log: %s", r.Standby.logTail())
	}
	for {
		conn, err := pgx.Connect(ctx, r.Standby.adminDSN+"&target_session_attrs=read-write")
		if err == nil {
			conn.Close(context.Background())
			r.promoted = true
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the promoted standby does not accept writes: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Failover stops the primary hard (KillPrimary) and promotes the standby
// (Promote).
func (r *ReplicaSet) Failover(ctx context.Context) error {
	if err := r.KillPrimary(); err != nil {
		return err
	}
	return r.Promote(ctx)
}

// Close stops both servers and removes their directories.
func (r *ReplicaSet) Close() error {
	err := r.Standby.Close() // its directory is inside the primary's
	return errors.Join(err, r.Primary.Close())
}
