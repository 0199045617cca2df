// Package mariatest runs a throwaway MariaDB (or MySQL) server for tests,
// beside internal/testing/pgtest's PostgreSQL.
//
// A test binary shares one server: the one MYSQL_URL names when it is set
// (a go-sql-driver DSN such as "root:pw@tcp(127.0.0.1:3306)/", for an
// existing MySQL 8 or MariaDB server whose user may create and drop
// databases), otherwise a server this package starts on first use:
// mariadb-install-db in a temporary directory, then mariadbd on a free
// 127.0.0.1 port and a Unix socket in that directory, with durability off
// (tests need no crash safety). The binaries come from Debian's
// mariadb-server package (scripts/ensure-deps.sh mariadb-server; make test
// installs it). As root both run as the "mysql" user (or "nobody"), since
// mariadbd refuses root.
//
// Every test gets a database of its own (New), dropped when the test ends.
// Its DSN is a plain go-sql-driver DSN (no clientFoundRows, the driver's
// default), so tests see what a new user sees; they add parameters to it
// as they need.
//
// A server this package started is owned by a watchdog process, as in
// internal/testing/pgtest: a small shell that starts mariadbd as its child and
// reads the test binary's end of a pipe. When the pipe closes (Close, normal
// exit, a panic, a go test timeout, SIGKILL) the watchdog stops the server
// and removes the directory, so nothing outlives the test binary. Close it
// from TestMain with pgtest.Main(m, mariatest.Close) so that it is gone
// before go test reports.
package mariatest
