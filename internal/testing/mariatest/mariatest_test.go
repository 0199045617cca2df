package mariatest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, mariatest.Close) }

// TestNewGivesAnEmptyDatabaseOfItsOwn: two tests' databases are distinct
// and usable with the default DSN; the session is REPEATABLE READ, as a new
// user's is.
func TestNewGivesAnEmptyDatabaseOfItsOwn(t *testing.T) {
	a, b := mariatest.New(t), mariatest.New(t)
	if a.Name == b.Name {
		t.Fatalf("both databases are %s", a.Name)
	}
	a.Exec("CREATE TABLE t (id INT PRIMARY KEY)")
	a.Exec("INSERT INTO t VALUES (1)")
	var n int
	if err := b.SQL().QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the second database has %d tables", n)
	}
	var iso string
	if err := a.SQL().QueryRow("SELECT @@transaction_isolation").Scan(&iso); err != nil {
		if err := a.SQL().QueryRow("SELECT @@tx_isolation").Scan(&iso); err != nil {
			t.Fatal(err)
		}
	}
	if iso != "REPEATABLE-READ" {
		t.Fatalf("isolation %s, want the default REPEATABLE-READ", iso)
	}
}

// TestCloseRemovesTheServer: a private server's Close stops mariadbd and
// removes its directory before it returns.
func TestCloseRemovesTheServer(t *testing.T) {
	if os.Getenv(mariatest.EnvDSN) != "" {
		t.Log("MYSQL_URL is set: this test still starts a private server")
	}
	s, err := mariatest.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Fatalf("no data directory while running: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s still there after Close: %v", dir, err)
	}
}
