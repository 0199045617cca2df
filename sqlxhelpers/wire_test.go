package sqlxhelpers_test

import (
	"bytes"
	"context"
	"database/sql"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// sent records what the connections dialled through it write to the
// server.
type sent struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *sent) take() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := bytes.Clone(s.buf.Bytes())
	s.buf.Reset()
	return b
}

type sentConn struct {
	net.Conn
	s *sent
}

func (c sentConn) Write(b []byte) (int, error) {
	c.s.mu.Lock()
	c.s.buf.Write(b)
	c.s.mu.Unlock()
	return c.Conn.Write(b)
}

func (s *sent) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return sentConn{c, s}, nil
}

// lib/pq's Dialer.
func (s *sent) Dial(network, addr string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, addr)
}

func (s *sent) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.DialContext(ctx, network, addr)
}

// TestStructUpdateSendsTheHandWrittenStatementsBytes: a struct-driven
// Update sends the server exactly the bytes the hand-written UPDATE with
// the same values sends — the same statement text, the same prepared
// statement from the driver's cache (pgx) or the same Parse (lib/pq), the
// same parameter formats and values — on both drivers. What it costs more
// than the hand-written form is client CPU alone (BenchmarkClientOverhead).
func TestStructUpdateSendsTheHandWrittenStatementsBytes(t *testing.T) {
	const hand = `UPDATE "accounts" SET "owner" = $1, "balance" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4`
	for _, drv := range []string{"pgx", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			d := pgtest.New(t)
			d.Exec(accountsDDL)
			d.Exec(`INSERT INTO accounts VALUES (1, 'a', 0, 0), (2, 'b', 0, 0)`)
			s := &sent{}
			var base *sql.DB
			if drv == "pgx" {
				cfg, err := pgx.ParseConfig(d.DSN)
				if err != nil {
					t.Fatal(err)
				}
				cfg.DialFunc = s.DialContext
				base = stdlib.OpenDB(*cfg)
			} else {
				c, err := pq.NewConnector(d.DSN)
				if err != nil {
					t.Fatal(err)
				}
				c.Dialer(s)
				base = sql.OpenDB(c)
			}
			t.Cleanup(func() { base.Close() })
			db := sqlx.NewDb(base, drv)
			ctx := context.Background()
			conn, err := db.Connx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			h := newHelper(t, db).On(conn)
			handWrite := func(a Account) {
				t.Helper()
				res, err := conn.ExecContext(ctx, hand, a.Owner, a.Balance, a.ID, int64(a.Version))
				if err != nil {
					t.Fatal(err)
				}
				if n, err := res.RowsAffected(); err != nil || n != 1 {
					t.Fatalf("hand-written update: %d rows, %v", n, err)
				}
			}
			// Warm both forms on row 2: the driver's statement cache.
			warm := Account{ID: 2, Owner: "b", Balance: 1}
			if err := h.Update(ctx, "accounts", &warm); err != nil {
				t.Fatal(err)
			}
			handWrite(warm)
			s.take()

			row := Account{ID: 1, Owner: "a", Balance: 5}
			if err := h.Update(ctx, "accounts", &row); err != nil {
				t.Fatal(err)
			}
			viaStruct := s.take()
			d.Exec(`UPDATE accounts SET version = 0 WHERE id = 1`) // another connection: not recorded
			handWrite(Account{ID: 1, Owner: "a", Balance: 5})
			viaHand := s.take()
			if len(viaStruct) == 0 || !bytes.Equal(viaStruct, viaHand) {
				t.Fatalf("the struct-driven Update sent\n%q\nthe hand-written one\n%q", viaStruct, viaHand)
			}
			t.Logf("%d bytes, identical", len(viaStruct))
		})
	}
}
