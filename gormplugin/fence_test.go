package gormplugin_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

// Shipment is a fenced model: Fence receives the fencing token of the
// lock holder that wrote the row (NULL: never written under a lock).
type Shipment struct {
	ID      uint
	State   string
	Version int64 `gorm:"not null;default:1" lock:"version"`
	Fence   int64 `lock:"fence"`
}

// SoftShipment is a fenced model with soft delete.
type SoftShipment struct {
	ID        uint
	State     string
	Version   int64 `gorm:"not null;default:1" lock:"version"`
	Fence     int64 `lock:"fence"`
	DeletedAt gorm.DeletedAt
}

func fencedDB(t *testing.T, open func(testing.TB, ...gormplugin.Option) *gorm.DB) *gorm.DB {
	t.Helper()
	db := open(t)
	must(t, db.AutoMigrate(&Shipment{}, &SoftShipment{}))
	return db
}

// create inserts a row with a NULL fence.
func create(t *testing.T, db *gorm.DB, state string) Shipment {
	t.Helper()
	s := Shipment{State: state}
	must(t, db.Omit("Fence").Create(&s).Error)
	return s
}

func readShipment(t *testing.T, db *gorm.DB, id uint) (state string, version int64, fence *int64) {
	t.Helper()
	must(t, db.Table("shipments").Select("state", "version", "fence").Where("id = ?", id).Row().Scan(&state, &version, &fence))
	return
}

// The paused holder with real leases, through GORM: the old holder's
// lease expires on the server, the new holder takes over and writes; the
// old holder's Update, Save and Delete are refused by the row and change
// nothing, in the database or in its struct.
func TestFencedGormWriteRefusedAfterLeaseTakeover(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.New(t)
	db := openWith(t, postgres.Open(pg.DSN), nil)
	must(t, db.AutoMigrate(&Shipment{}))
	if err := lease.Migrate(ctx, pg.SQL()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(pg.SQL())
	ttl := max(2*time.Second, 50*pg.Latency())
	old, err := m.TryAcquire(ctx, "shipment", ttl)
	must(t, err)
	defer old.Release(ctx)
	s := create(t, db, "packed")
	mine := s // the old holder's copy, read under its lease
	must(t, db.Exec(`UPDATE sqlock_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = 'shipment'`).Error)
	new, err := m.TryAcquire(ctx, "shipment", ttl)
	must(t, err)
	defer new.Release(ctx)

	newDB := db.WithContext(sqlock.WithFencingToken(ctx, new.Token()))
	must(t, newDB.Model(&s).Update("state", "shipped").Error)
	if s.Version != 2 || s.Fence != new.Token() {
		t.Fatalf("after the new holder's write: %+v", s)
	}

	oldDB := db.WithContext(sqlock.WithFencingToken(ctx, old.Token()))
	want := mine
	err = oldDB.Model(&mine).Update("state", "lost").Error
	var fe *versioned.FencedError
	if !errors.As(err, &fe) || errors.Is(err, versioned.ErrStale) || fe.Token != old.Token() || fe.Current != new.Token() || fe.Table != "shipments" {
		t.Fatalf("old holder's update: %v", err)
	}
	if mine.Version != want.Version || mine.Fence != want.Fence { // GORM itself copies the assigned values in
		t.Fatalf("refused update changed the struct's version or fence: %+v", mine)
	}
	// At the current version: still fenced out, through every write path.
	var cur Shipment
	must(t, db.First(&cur, s.ID).Error)
	for name, write := range map[string]func(*Shipment) error{
		"Update": func(x *Shipment) error { return oldDB.Model(x).Update("state", "lost").Error },
		"Updates": func(x *Shipment) error {
			return oldDB.Model(x).Updates(map[string]any{"state": "lost", "fence": 1}).Error
		},
		"Save":   func(x *Shipment) error { x.State = "lost"; return oldDB.Save(x).Error },
		"Delete": func(x *Shipment) error { return oldDB.Delete(x).Error },
		"in a transaction": func(x *Shipment) error {
			return oldDB.Transaction(func(tx *gorm.DB) error { return tx.Model(x).Update("state", "lost").Error })
		},
	} {
		c := cur
		if err := write(&c); !errors.Is(err, versioned.ErrFenced) {
			t.Errorf("%s: %v, want ErrFenced", name, err)
		}
		if c.Version != cur.Version || c.Fence != cur.Fence {
			t.Errorf("%s: refused write changed the struct: %+v", name, c)
		}
	}
	if st, v, f := readShipment(t, db, s.ID); st != "shipped" || v != 2 || f == nil || *f != new.Token() {
		t.Fatalf("row: %s %d %v", st, v, f)
	}
}

// A refused fenced write is fenced (a larger fence), stale (another
// version) or gone (no row), each its own error; a NULL fence counts as 0
// and an equal token passes. On PostgreSQL, SQLite and MariaDB.
func TestFencedGormWriteToldApartFromStaleAndMissing(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := fencedDB(t, b.open)
			ctx := sqlock.WithFencingToken(context.Background(), 5)
			tdb := db.WithContext(ctx)
			a, c := create(t, db, "a"), create(t, db, "c")
			must(t, db.Exec(`UPDATE shipments SET fence = 9 WHERE id = ?`, a.ID).Error)
			must(t, db.Exec(`UPDATE shipments SET version = 3, fence = 4 WHERE id = ?`, c.ID).Error)

			var fe *versioned.FencedError
			var se *versioned.StaleError
			x := a
			if err := tdb.Model(&x).Update("state", "x").Error; !errors.As(err, &fe) || fe.Current != 9 || fe.Token != 5 || fe.Op != "update" {
				t.Errorf("fenced update: %v", err)
			}
			if err := tdb.Delete(&x).Error; !errors.As(err, &fe) || fe.Op != "delete" {
				t.Errorf("fenced delete: %v", err)
			}
			x = c // at version 1, the row at 3
			if err := tdb.Model(&x).Update("state", "x").Error; !errors.As(err, &se) || !se.Probed || se.Current != 3 || errors.Is(err, versioned.ErrFenced) {
				t.Errorf("stale update: %v", err)
			}
			x = Shipment{ID: 999, Version: 1}
			if err := tdb.Model(&x).Update("state", "x").Error; !errors.As(err, &se) || !se.Gone || errors.Is(err, versioned.ErrFenced) {
				t.Errorf("missing row: %v", err)
			}
			// NULL fence, then the same token again.
			n := create(t, db, "n")
			must(t, tdb.Model(&n).Update("state", "one").Error)
			must(t, tdb.Model(&n).Update("state", "two").Error)
			if st, v, f := readShipment(t, db, n.ID); st != "two" || v != 3 || f == nil || *f != 5 || n.Fence != 5 || n.Version != 3 {
				t.Fatalf("row %s %d %v, struct %+v", st, v, f, n)
			}
			// Soft delete: the fence is checked and written with the bump.
			sf := SoftShipment{State: "s"}
			must(t, db.Omit("Fence").Create(&sf).Error)
			must(t, db.Exec(`UPDATE soft_shipments SET fence = 6 WHERE id = ?`, sf.ID).Error)
			if err := tdb.Delete(&sf).Error; !errors.Is(err, versioned.ErrFenced) || sf.Version != 1 || sf.DeletedAt.Valid {
				t.Fatalf("fenced soft delete: %v %+v", err, sf)
			}
			must(t, db.WithContext(sqlock.WithFencingToken(ctx, 6)).Delete(&sf).Error)
			if sf.Version != 2 || sf.Fence != 6 {
				t.Fatalf("soft delete: %+v", sf)
			}
		})
	}
}

// A fenced model written without a usable token is refused before
// anything is sent; SkipVersionCheck is the deliberate, unfenced blind
// write. A batch write carries the fence too: rows past the token are not
// written.
func TestFencedGormWriteNeedsAToken(t *testing.T) {
	db := fencedDB(t, openPostgres)
	s := create(t, db, "a")
	log := &sqlLog{}
	ldb := db.Session(&gorm.Session{Logger: log})
	ctx := context.Background()
	for name, err := range map[string]error{
		"update":         ldb.Model(&s).Update("state", "x").Error,
		"save":           ldb.Save(&s).Error,
		"delete":         ldb.Delete(&s).Error,
		"zero token":     ldb.WithContext(sqlock.WithFencingToken(ctx, 0)).Model(&s).Update("state", "x").Error,
		"negative token": ldb.WithContext(sqlock.WithFencingToken(ctx, -2)).Delete(&s).Error,
		"batch":          ldb.Model(&Shipment{}).Where("state = ?", "a").Update("state", "x").Error,
	} {
		if !errors.Is(err, versioned.ErrInvalidArg) {
			t.Errorf("%s: %v, want ErrInvalidArg", name, err)
		}
	}
	if log.contains("UPDATE") || log.contains("DELETE") {
		t.Errorf("a refused write was sent: %q", log.all())
	}
	if s.Version != 1 || s.Fence != 0 {
		t.Fatalf("refused writes changed the struct: %+v", s)
	}
	must(t, db.Scopes(gormplugin.SkipVersionCheck).Model(&s).Update("state", "blind").Error)
	// A batch with a token writes only the rows its token may write.
	b := create(t, db, "b")
	must(t, db.Exec(`UPDATE shipments SET fence = 8 WHERE id = ?`, b.ID).Error)
	res := db.WithContext(sqlock.WithFencingToken(ctx, 7)).Model(&Shipment{}).Where("id IN ?", []uint{s.ID, b.ID}).Update("state", "batch")
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("fenced batch: %v, %d rows", res.Error, res.RowsAffected)
	}
	if st, _, f := readShipment(t, db, b.ID); st != "b" || *f != 8 {
		t.Fatalf("a batch wrote past the fence: %s %v", st, *f)
	}
	if st, _, f := readShipment(t, db, s.ID); st != "batch" || *f != 7 {
		t.Fatalf("batch row: %s %v", st, f)
	}
}

// Many holders race fenced GORM writes to one row, each with its own
// token, re-reading on a stale version. In the database: the writes that
// landed are in history in commit order, their tokens never go down, and
// the final fence is the largest token, which always writes.
func TestFencedGormWritesRaceNeverLandOlderAfterNewer(t *testing.T) {
	db := fencedDB(t, openPostgres)
	must(t, db.Exec(`CREATE TABLE history (seq bigserial PRIMARY KEY, token bigint NOT NULL)`).Error)
	s := create(t, db, "start")
	const holders, writes = 12, 4
	var wg sync.WaitGroup
	errs := make(chan error, holders)
	start := make(chan struct{})
	for _, p := range rand.Perm(holders) {
		tok := int64(p + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx := sqlock.WithFencingToken(context.Background(), tok)
			for range writes {
				err := retry.Do(ctx, func(ctx context.Context) error {
					return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
						var row Shipment
						if err := tx.First(&row, s.ID).Error; err != nil {
							return err
						}
						if err := tx.Model(&row).Update("state", fmt.Sprint(tok)).Error; err != nil {
							return err
						}
						return tx.Exec(`INSERT INTO history (token) VALUES (?)`, tok).Error
					})
				}, retry.WithMaxAttempts(1000), retry.WithBackoff(retry.Constant(0)))
				if errors.Is(err, versioned.ErrFenced) {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("token %d: %w", tok, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var toks []int64
	must(t, db.Raw(`SELECT token FROM history ORDER BY seq`).Scan(&toks).Error)
	for i := 1; i < len(toks); i++ {
		if toks[i] < toks[i-1] {
			t.Fatalf("token %d landed after %d", toks[i], toks[i-1])
		}
	}
	_, v, f := readShipment(t, db, s.ID)
	if len(toks) == 0 || toks[len(toks)-1] != holders || f == nil || *f != holders || v != int64(1+len(toks)) {
		t.Fatalf("history %v, fence %v, version %d", toks, f, v)
	}
}

// A fenced GORM write costs the round trips of the same unfenced
// versioned write, counted on the wire (GORM's own BEGIN and COMMIT
// included).
func TestFencedGormWriteCostsNoExtraRoundTrip(t *testing.T) {
	pg := pgtest.New(t)
	cfg, err := pgx.ParseConfig(pg.DSN)
	must(t, err)
	var writes atomic.Int64
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		return countingConn{c, &writes}, err
	}
	sdb := stdlib.OpenDB(*cfg)
	sdb.SetMaxOpenConns(1)
	defer sdb.Close()
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sdb}), &gorm.Config{Logger: logger.Discard})
	must(t, err)
	must(t, db.Use(gormplugin.New()))
	must(t, db.AutoMigrate(&Shipment{}, &Ticket{}))
	ctx := sqlock.WithFencingToken(context.Background(), 5)
	tdb := db.WithContext(ctx)
	s := create(t, db, "a")
	tk := Ticket{Status: "a"}
	must(t, db.Create(&tk).Error)
	count := func(f func() error) int64 {
		t.Helper()
		before := writes.Load()
		if err := f(); err != nil && !errors.Is(err, versioned.ErrFenced) {
			t.Fatal(err)
		}
		return writes.Load() - before
	}
	plain := func() error { return tdb.Model(&tk).Update("status", "b").Error }
	fenced := func() error { return tdb.Model(&s).Update("state", "b").Error }
	refused := func() error {
		c := s
		return db.WithContext(sqlock.WithFencingToken(ctx, 4)).Model(&c).Update("state", "c").Error
	}
	for _, f := range []func() error{plain, fenced, refused} {
		count(f) // warm the statement cache
	}
	p, f, r := count(plain), count(fenced), count(refused)
	if f != p || r != p+1 {
		t.Fatalf("round trips: unfenced %d, fenced %d (want %d), refused %d (want %d)", p, f, p, r, p+1)
	}
	t.Logf("round trips (GORM's transaction included): unfenced %d, fenced %d, refused %d", p, f, r)
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// An upsert that would update a fenced row is refused (it cannot carry
// the fence); a plain create and a DO NOTHING upsert are not writes of an
// existing row and pass.
func TestFencedGormUpsertIsRefused(t *testing.T) {
	db := fencedDB(t, openSQLite)
	ctx := sqlock.WithFencingToken(context.Background(), 3)
	s := create(t, db, "a")
	s.State = "b"
	err := db.WithContext(ctx).Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns([]string{"state"})}).Create(&s).Error
	if !errors.Is(err, sqlock.ErrUnsupported) {
		t.Fatalf("fenced upsert: %v", err)
	}
	must(t, db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&Shipment{ID: s.ID, State: "c"}).Error)
	if st, v, _ := readShipment(t, db, s.ID); st != "a" || v != 1 {
		t.Fatalf("row: %s %d", st, v)
	}
}
