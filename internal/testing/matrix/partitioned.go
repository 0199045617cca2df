package matrix

import (
	"context"
	"fmt"
)

// Stallable is what a partition needs of the path between a holder and
// its store: pgtest's proxies, which hold every byte while stalled.
type Stallable interface {
	Stall()
	Resume()
}

// Partitioned is the fault "holder partitioned from its store", the same on
// every lock row. Holder A, whose client reaches the store through p, takes
// the lock of c's first item and reads it: a builds A's actor on the
// Querier it is given, which holds A between its read and its write. Then
// p stalls, so A's renewals stop and the store lets its lock go; B takes
// the lock and applies the operation (recorded); p resumes and A writes
// what it read. Fenced, its token is older than B's and PostgreSQL refuses
// the write; unfenced, the item is applied twice, which the cell's check
// counts. A is the fault, not one of its operations: what A and B got is
// in the note, after holder and next (what each is, for the reader).
func (f *FaultRun) Partitioned(ctx context.Context, c *Cell, p Stallable, a func(Querier) Actor, b Actor, holder, next string) error {
	key := c.State.Key(0)
	h, err := Hold(ctx, func(ctx context.Context, pause func(context.Context)) (Result, error) {
		return a(PauseBeforeWrite(c.DB, pause)).Op(ctx, key)
	})
	if err != nil {
		return fmt.Errorf("holder A: %w", err)
	}
	p.Stall()
	_, berr := f.Do(ctx, b, key)
	p.Resume()
	_, aerr := h.Wait(ctx)
	f.Note("%s; %s: %s; A's write once the partition healed: %s", holder, next, Outcome(berr), Outcome(aerr))
	return nil
}

// Outcome is err's text, or "ok" for nil: what a note says an operation
// got.
func Outcome(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// Hold starts a's operation on c's item key, a's Querier being c's
// database, and holds it between its read and its write ([Hold]): one of
// the run's operations ([FaultRun.Do]), whose outcome counts.
func (f *FaultRun) Hold(ctx context.Context, c *Cell, key string, a func(Querier) Actor) (*Held, error) {
	return Hold(ctx, func(ctx context.Context, pause func(context.Context)) (Result, error) {
		return f.Do(ctx, a(PauseBeforeWrite(c.DB, pause)), key)
	})
}
