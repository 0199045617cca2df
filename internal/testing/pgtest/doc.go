// Package pgtest runs a throwaway PostgreSQL for tests, benchmarks and the
// demo.
//
// A test binary shares one server: the one DATABASE_URL names when it is set
// (make test starts one cluster for every package and sets it), otherwise a
// cluster this package creates with initdb in a temporary directory and
// starts on a free 127.0.0.1 port and on a Unix socket in that directory. The
// binaries are found on PATH, then in /usr/lib/postgresql/*/bin (newest
// first). As root the server runs as the "postgres" user (or "nobody"), since
// initdb refuses root.
//
// Every test gets a database of its own (New), created from template0 with
// UTF-8 encoding and the C collation and dropped when the test ends, so tests
// and packages never see each other's rows. Advisory locks are scoped to a
// database too, so a test that inspects pg_locks must filter on
// database = (SELECT oid FROM pg_database WHERE datname = current_database()).
//
// A cluster this package started is owned by a watchdog process: a small
// shell that starts postgres as its child and reads the test binary's end of
// a pipe. When the pipe closes — Close, normal exit, a panic, a go test
// timeout, SIGKILL — the watchdog stops the server and removes the directory,
// so no postgres process or temporary directory outlives the test binary.
//
// StartPgBouncer puts PgBouncer (the Debian package's /usr/sbin/pgbouncer)
// in front of a test's database, in session or transaction pool mode, and
// returns a DSN through it; RunPgBouncer is the form with options and no
// testing.TB. It reads the server's host, port, user and password from the
// database's DSN, so it works with DATABASE_URL servers too, listens on a
// free 127.0.0.1 port with auth_type=trust, and runs as the server's
// unprivileged user when root (PgBouncer refuses root). Like a cluster, it is
// owned by a watchdog shell that stops it and removes its directory when the
// test binary goes away. StartPreparedTrap runs it with one server connection,
// where pgx's default query exec mode fails for certain (42P05), and
// CheckPreparedTrap checks the error every package gives for that.
//
// StartReplicaSet (NewReplicaSet in a test) starts a primary and a
// streaming hot standby made from it with pg_basebackup and a replication
// slot, synchronous or asynchronous, each on its own free port and owned by
// its own watchdog; the standby's directory is inside the primary's, so
// every exit path removes both. Its DSN names both hosts with
// target_session_attrs=read-write, so a pool follows a failover;
// KillPrimary stops the primary as pg_ctl stop -m immediate does, Promote
// promotes the standby and waits until it takes writes, Failover does
// both, WaitReplay waits until the standby has replayed what the primary
// wrote, and Lag reports the standby's flush lag in bytes.
//
// Fault levers: TerminateBackend works on any server the tests may
// administer; Stop, Kill (a crash: SIGQUIT), Start and Restart only on a
// cluster this process owns, and tests that use them should start a
// private one with StartCluster so that other tests sharing a server are
// not disturbed.
package pgtest
