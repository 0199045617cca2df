package demo

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type scenario struct {
	name, title string
	anomaly     string // the column header for what goes wrong
	replicas    int    // OS processes
	goroutines  int    // per process
	setup       func(strategy string) string
	verify      func(ctx context.Context, conn *pgx.Conn) (anomalies int, detail string, err error)
	strategies  []*strategy
}

type strategy struct {
	name string
	note string // printed under the table: how a service writes it
	run  func(ctx context.Context, w *replica, g int)
	// serve, if set, starts what the replica serves before it says it is
	// ready (an HTTP server); stop runs after its goroutines are done.
	serve func(ctx context.Context, w *replica) (stop func(), err error)
	// mustHold: an anomaly under this strategy fails the demo.
	mustHold bool
}

func (sc *scenario) strategy(name string) *strategy {
	for _, st := range sc.strategies {
		if st.name == name {
			return st
		}
	}
	return nil
}

func findScenario(name string) *scenario {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc
		}
	}
	return nil
}

var scenarios = []*scenario{paymentScenario, clientRetryScenario, seatScenario, stockScenario, claimScenario, orderEditScenario}
