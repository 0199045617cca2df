package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestUsageErrorsExitTwo(t *testing.T) {
	db := pgtest.New(t)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"key"},
		{"key", ""},
		{"key", "a", "b"},
		{"locks", "extra"},
		{"locks", "--every", "0s"},
		{"locks", "--name", ""},
		{"locks", "--bogus"},
		{"leases", "--table", "x;drop"},
	} {
		if r := runCmd(t, db.DSN, args...); r.code != exitUsage || r.stderr == "" {
			t.Errorf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if r := runCmd(t, "", "locks"); r.code != exitUsage || !strings.Contains(r.stderr, "DATABASE_URL") {
		t.Errorf("no DSN: exit %d %q", r.code, r.stderr)
	}
	if r := runCmd(t, "", "--help"); r.code != 0 || !strings.Contains(r.stderr, "sqlock locks") {
		t.Errorf("--help: exit %d", r.code)
	}
}

func TestUnreachableDSNExitsThree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	dsn := "postgres://someone:secret-pw@" + addr + "/db?sslmode=disable"
	for _, args := range [][]string{{"locks"}, {"leases"}, {"key", "x"}} {
		r := runCmd(t, dsn, args...)
		if r.code != exitConnect || !strings.Contains(r.stderr, "cannot connect to someone@127.0.0.1") {
			t.Errorf("%q: exit %d, %q", args, r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "secret-pw") {
			t.Errorf("the password is printed: %q", r.stderr)
		}
	}
}

func TestWithoutReadAllStatsExitsFourAndSaysWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	admin := session(t, db, "admin")
	role := "sqlock_cli_" + db.Name[len(db.Name)-6:]
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, db.Cluster.AdminDSN())
		if err == nil {
			c.Exec(ctx, "DROP ROLE IF EXISTS "+role)
			c.Close(ctx)
		}
	})
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := pgx.ParseConfig(db.DSN)
	cfg.User, cfg.Password = role, "pw"
	dsn := "postgres://" + role + ":pw@" + net.JoinHostPort(cfg.Host, itoa(int(cfg.Port))) + "/" + cfg.Database + "?sslmode=disable"
	r := runCmd(t, dsn, "locks")
	if r.code != exitPrivilege || !strings.Contains(r.stderr, "pg_read_all_stats") || !strings.Contains(r.stderr, "GRANT") ||
		r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// A server that speaks PostgreSQL's protocol but is not PostgreSQL (as
// CockroachDB does) is refused with exit 5.
func TestNonPostgreSQLServerExitsFive(t *testing.T) {
	addr := fakeServer(t, "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27)")
	r := runCmd(t, "postgres://root@"+addr+"/defaultdb?sslmode=disable", "locks")
	if r.code != exitUnsupported || !strings.Contains(r.stderr, "not PostgreSQL") || !strings.Contains(r.stderr, "CockroachDB") {
		t.Fatalf("exit %d, %q", r.code, r.stderr)
	}
}

// fakeServer answers the wire protocol as a server whose version() is
// version and which knows no other query.
func fakeServer(t *testing.T, version string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serveFake(c, version)
		}
	}()
	return ln.Addr().String()
}

func serveFake(c net.Conn, version string) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	for {
		m, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := m.(*pgproto3.SSLRequest); ok {
			c.Write([]byte("N"))
			continue
		}
		break
	}
	send := func(ms ...pgproto3.BackendMessage) bool {
		for _, m := range ms {
			be.Send(m)
		}
		return be.Flush() == nil
	}
	send(&pgproto3.AuthenticationOk{},
		&pgproto3.ParameterStatus{Name: "server_version", Value: "13.0.0"},
		&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"},
		&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"},
		&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})
	text := func(name string) pgproto3.FieldDescription {
		return pgproto3.FieldDescription{Name: []byte(name), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}
	}
	var query string
	failed := false
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		switch m := m.(type) {
		case *pgproto3.Query: // pings
			send(&pgproto3.EmptyQueryResponse{}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Parse:
			query = m.Query
			if !strings.Contains(query, "version()") {
				failed = true
				send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42883", Message: "unknown function"})
			} else {
				send(&pgproto3.ParseComplete{})
			}
		case *pgproto3.Describe:
			if failed {
				continue
			}
			if m.ObjectType == 'S' {
				send(&pgproto3.ParameterDescription{ParameterOIDs: []uint32{25, 25}})
			}
			send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
				text("version"), text("num"), text("user"), text("all"), text("names"), text("leases")}})
		case *pgproto3.Bind:
			if !failed {
				send(&pgproto3.BindComplete{})
			}
		case *pgproto3.Execute:
			if !failed {
				send(&pgproto3.DataRow{Values: [][]byte{[]byte(version), []byte("230111"), []byte("root"),
					[]byte("t"), []byte("f"), []byte("f")}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			}
		case *pgproto3.Sync:
			failed = false
			send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Close:
			send(&pgproto3.CloseComplete{})
		case *pgproto3.Terminate:
			return
		}
	}
}
