package gormplugin

import (
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock/internal/vguard"
	"github.com/sqlock/sqlock/observe"
)

// Name is the plugin's name in gorm.DB.Plugins.
const Name = "sqlock:gormplugin"

// skipName names the statement clause SkipVersionCheck adds. It is never
// built into SQL.
const skipName = "sqlock:skip_version_check"

// skipMarker is the clause SkipVersionCheck adds.
type skipMarker struct{}

func (skipMarker) Name() string                 { return skipName }
func (skipMarker) Build(clause.Builder)         {}
func (skipMarker) MergeClause(c *clause.Clause) { c.Expression = skipMarker{} }

// SkipVersionCheck is a GORM scope that makes one statement a deliberate
// blind write:
//
//	db.Scopes(gormplugin.SkipVersionCheck).Model(&order).Update("status", "void")
//
// The statement is not checked against the loaded version and is never
// refused for a missing key or a slice model, but every row it updates still
// gets its version bumped, so that optimistic writers holding the old
// version notice. The in-memory version is left as it was (the new one is
// not known): re-read the row. It also permits ON CONFLICT upserts that
// update every column, which are otherwise refused on versioned models;
// their version assignment is a bump too, and their RETURNING gives the
// struct the row's version. It
// is named on purpose: Unscoped keeps its GORM meaning (no soft-delete
// filter) and does not affect versioning.
//
// The switch is a statement clause rather than a db.Set setting, so that
// checking for it costs a map lookup on every statement, not the
// initialisation of the statement's settings map.
func SkipVersionCheck(db *gorm.DB) *gorm.DB { return db.Clauses(skipMarker{}) }

// NullPolicy says how a NULL in a version column is treated.
type NullPolicy uint8

const (
	// NullAsZero (the default) treats a NULL version as 0. A struct whose
	// version is 0 is checked with (version = 0 OR version IS NULL), and the
	// bump is COALESCE(version, 0) + 1, so a row with a NULL version
	// (typically a version column added to a table that already had rows)
	// gets version 1 on its first write through the plugin and is checked
	// from then on. Two writers that both loaded the NULL row race exactly as
	// for any other version: the first wins, the second is stale.
	NullAsZero NullPolicy = iota
	// NullRefused never matches a NULL version: a write expecting 0 is
	// checked with version = 0 only, and when it matches no row the plugin
	// reads the row's version; if it is NULL the statement fails with a
	// *NullVersionError (ErrNullVersion), which package retry does not
	// retry. Use it when NULL versions must be repaired by a migration.
	NullRefused
)

func (p NullPolicy) String() string {
	switch p {
	case NullAsZero:
		return "null-as-zero"
	case NullRefused:
		return "null-refused"
	}
	return "unknown"
}

// Option configures a Plugin.
type Option func(*config)

type config struct {
	observer observe.Observer
	probe    bool
	null     NullPolicy
}

// WithObserver reports each stale write (observe.Stale, Source "gormplugin",
// System the dialector's database as OpenTelemetry's db.system.name spells
// it, with the table and the *versioned.StaleError) to o. The default does
// nothing; to log stale writes, WithObserver([observe.Slog](l)).
// Several WithObserver options add up ([observe.Multi]); a nil o adds
// nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return func(c *config) { c.observer = observe.Multi(c.observer, o) }
}

// WithProbe makes a stale write run one more query, a SELECT of the row's
// version by primary key inside the same transaction, to tell a row that
// is gone (StaleError.Gone) from one that changed (StaleError.Current). It costs nothing unless a write
// goes stale. The probe's own failure is reported in StaleError.ProbeErr
// and never replaces the stale error.
func WithProbe() Option { return func(c *config) { c.probe = true } }

// WithNullPolicy sets how a NULL version in the database is treated
// (default NullAsZero).
func WithNullPolicy(p NullPolicy) Option { return func(c *config) { c.null = p } }

// Plugin is the GORM plugin. Build it with New and install it with db.Use.
// It is safe for concurrent use; its only state is a cache of what it found
// in each GORM schema.
type Plugin struct {
	cfg      config
	models   sync.Map     // *schema.Schema → *model
	undo     sync.Map     // gorm.ConnPool of a running Transaction → *undoLog
	tracking atomic.Int64 // how many Transactions are running (0: skip the undo lookup)
}

// New returns the plugin, configured by opts.
func New(opts ...Option) *Plugin {
	p := &Plugin{cfg: config{observer: observe.Nop{}}}
	for _, o := range opts {
		if o != nil {
			o(&p.cfg)
		}
	}
	return p
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return Name }

// Callback names, for users who order their own callbacks around them.
const (
	CallbackCreate       = "sqlock:version_create"
	CallbackBeforeUpdate = "sqlock:version_before_update"
	CallbackAfterUpdate  = "sqlock:version_after_update"
	CallbackBeforeDelete = "sqlock:version_before_delete"
	CallbackAfterDelete  = "sqlock:version_after_delete"
)

// The callbacks that run after GORM's commit or rollback, to put a struct
// back when its write did not hold.
const (
	callbackAfterCreate  = "sqlock:version_after_create"
	callbackFinishCreate = "sqlock:version_finish_create"
	callbackFinishUpdate = "sqlock:version_finish_update"
	callbackFinishDelete = "sqlock:version_finish_delete"
)

// Initialize implements gorm.Plugin: it registers the callbacks. The checks
// run before GORM's after-hooks and before its commit, so a stale write
// rolls back GORM's implicit transaction (and suppresses Save's fallback
// upsert); the last ones run after the commit or rollback.
func (p *Plugin) Initialize(db *gorm.DB) error {
	cb := db.Callback()
	if err := cb.Create().Before("gorm:create").Register(CallbackCreate, p.beforeCreate); err != nil {
		return err
	}
	if err := cb.Create().After("gorm:create").Before("gorm:save_after_associations").Register(callbackAfterCreate, p.afterCreate); err != nil {
		return err
	}
	if err := cb.Create().After("gorm:commit_or_rollback_transaction").Register(callbackFinishCreate, p.finishCreate); err != nil {
		return err
	}
	if err := cb.Update().After("gorm:commit_or_rollback_transaction").Register(callbackFinishUpdate, p.finish); err != nil {
		return err
	}
	if err := cb.Delete().After("gorm:commit_or_rollback_transaction").Register(callbackFinishDelete, p.finish); err != nil {
		return err
	}
	if err := cb.Update().Before("gorm:update").Register(CallbackBeforeUpdate, p.beforeUpdate); err != nil {
		return err
	}
	// Right after gorm:update, before associations, after-hooks and the
	// commit (a bare After("gorm:update") would land after the commit).
	if err := cb.Update().After("gorm:update").Before("gorm:save_after_associations").Register(CallbackAfterUpdate, p.afterUpdate); err != nil {
		return err
	}
	if err := cb.Delete().Before("gorm:delete").Register(CallbackBeforeDelete, p.beforeDelete); err != nil {
		return err
	}
	return cb.Delete().After("gorm:delete").Before("gorm:after_delete").Register(CallbackAfterDelete, p.afterDelete)
}

func skipped(db *gorm.DB) bool {
	_, ok := db.Statement.Clauses[skipName]
	return ok
}

// vguardFor describes a versioned statement of db to vguard, which decides
// its outcome and reports it to the plugin's observer.
func (p *Plugin) vguardFor(db *gorm.DB, key any, expected int64, op string) vguard.Guard {
	return vguard.Guard{Table: db.Statement.Table, Key: key, Expected: expected, Op: op,
		Observer: p.cfg.observer, Source: "gormplugin", System: system(db.Dialector)}
}

// system names the database of a GORM dialector as OpenTelemetry's
// db.system.name spells it, for observe.Event.System: "mysql" for MariaDB
// too (gorm.io/driver/mysql serves both under one name), "" for a
// dialector it does not know.
func system(d gorm.Dialector) string {
	if d == nil {
		return ""
	}
	switch d.Name() {
	case "postgres":
		return "postgresql"
	case "mysql":
		return "mysql"
	case "sqlite":
		return "sqlite"
	case "sqlserver":
		return "microsoft.sql_server"
	}
	return ""
}
