package demo

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/versioned"
)

// Task claim: 10 workers (5 processes × 2 goroutines) drain 1,000 tasks.
// A worker picks the first unclaimed task, claims it, and processes it.
// Processing a task twice is the anomaly.
const (
	claimTasks = 1000
	pickTime   = 200 * time.Microsecond
)

var claimScenario = &scenario{
	name:       "claim",
	title:      "4. task claim — 10 workers, 1,000 tasks",
	anomaly:    "processed twice",
	replicas:   5,
	goroutines: 2,
	setup: func(string) string {
		return `DROP TABLE IF EXISTS tasks;
			CREATE TABLE tasks (id int PRIMARY KEY, status text NOT NULL DEFAULT 'unclaimed', worker int,
				processed int NOT NULL DEFAULT 0);
			INSERT INTO tasks (id) SELECT generate_series(1, 1000);`
	},
	verify: func(ctx context.Context, conn *pgx.Conn) (int, string, error) {
		var twice, done int
		err := conn.QueryRow(ctx, `SELECT coalesce(sum(processed - 1) FILTER (WHERE processed > 1), 0),
			count(*) FILTER (WHERE processed > 0) FROM tasks`).Scan(&twice, &done)
		if err == nil && done != claimTasks {
			err = errors.New("not every task was processed")
		}
		return twice, "", err
	},
	strategies: []*strategy{
		{name: "naive", run: claimLoop(claimNaive)},
		{name: "compare-and-swap", run: claimLoop(claimCAS)},
	},
}

// claimLoop runs until no unclaimed task is left; claim reports whether it
// got the task it picked.
func claimLoop(claim func(ctx context.Context, w *replica, task, me int) (bool, error)) func(context.Context, *replica, int) {
	return func(ctx context.Context, w *replica, g int) {
		me := w.replica*w.goroutines + g + 1
		for {
			var task int
			err := w.db.QueryRowContext(ctx,
				"SELECT id FROM tasks WHERE status = 'unclaimed' ORDER BY id LIMIT 1").Scan(&task)
			if errors.Is(err, sql.ErrNoRows) {
				return
			}
			if err != nil {
				w.count(0, err)
				return
			}
			time.Sleep(pickTime)
			got, err := claim(ctx, w, task, me)
			if err != nil {
				w.count(0, err)
				return
			}
			if !got {
				w.count(conflict, nil)
				continue
			}
			_, err = w.db.ExecContext(ctx, "UPDATE tasks SET processed = processed + 1 WHERE id = $1", task)
			w.count(success, err)
		}
	}
}

func claimNaive(ctx context.Context, w *replica, task, me int) (bool, error) {
	_, err := w.db.ExecContext(ctx, "UPDATE tasks SET status = 'claimed', worker = $1 WHERE id = $2", me, task)
	return err == nil, err
}

var tasksTable = versioned.MustTable("tasks")

func claimCAS(ctx context.Context, w *replica, task, me int) (bool, error) {
	res, err := versioned.CompareAndSwap(ctx, w.db, tasksTable, task,
		[]versioned.Pair{versioned.Eq("status", "unclaimed")},
		versioned.Set("status", "claimed"), versioned.Set("worker", me))
	return res == versioned.Won, err
}
