package gormplugin

import (
	"context"
	"reflect"
	"sync"

	"gorm.io/gorm"
)

// undoEntry is one struct's state before a write that a transaction may
// still roll back.
type undoEntry struct {
	m    *model
	rv   reflect.Value
	ver  int64
	soft reflect.Value // the soft-delete field before the write, if it changed

	fenced   bool // the write set the fence field; fenceWas is its value before
	fenceWas int64
}

// undoLog collects the in-memory changes of the versioned writes inside
// one locked transaction (Transaction), to put back if it rolls back: the
// plugin sees that rollback, unlike a caller's own db.Transaction.
type undoLog struct {
	mu      sync.Mutex
	entries []undoEntry
}

// track starts an undo log for the transaction on pool.
func (p *Plugin) track(pool gorm.ConnPool) *undoLog {
	l := &undoLog{}
	p.undo.Store(pool, l)
	p.tracking.Add(1)
	return l
}

// untrack ends pool's log; rolledBack puts every struct back, newest
// write first.
func (p *Plugin) untrack(ctx context.Context, pool gorm.ConnPool, l *undoLog, rolledBack bool) {
	p.undo.Delete(pool)
	p.tracking.Add(-1)
	if !rolledBack {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.entries) - 1; i >= 0; i-- {
		e := l.entries[i]
		e.m.set(ctx, e.rv, e.ver)
		if e.soft.IsValid() {
			e.m.softF.ReflectValueOf(ctx, e.rv).Set(e.soft)
		}
		if e.fenced {
			e.m.setFence(ctx, e.rv, e.fenceWas)
		}
	}
	l.entries = nil
}

func (p *Plugin) logOf(stmt *gorm.Statement) *undoLog {
	if p.tracking.Load() == 0 {
		return nil
	}
	v, ok := p.undo.Load(stmt.ConnPool)
	if !ok {
		return nil
	}
	return v.(*undoLog)
}

// recordUndo notes a held update or delete of g.rv.
func (p *Plugin) recordUndo(stmt *gorm.Statement, g *guard) {
	l := p.logOf(stmt)
	if l == nil {
		return
	}
	e := undoEntry{m: g.m, rv: g.rv, ver: g.expected, soft: g.softWas, fenced: g.fenced, fenceWas: g.fenceWas}
	if !g.bumped {
		e.ver, _ = g.m.get(stmt.Context, g.rv)
	}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// recordCreateUndo notes the versions a held create gave its structs.
func (p *Plugin) recordCreateUndo(stmt *gorm.Statement, cs *createState) {
	l := p.logOf(stmt)
	if l == nil {
		return
	}
	l.mu.Lock()
	for _, w := range cs.was {
		l.entries = append(l.entries, undoEntry{m: cs.m, rv: w.rv, ver: w.ver})
	}
	l.mu.Unlock()
}
