package demo

import "testing"

// Both clients complete an edit of every order, whatever the strategy.
func init() { requests[orderEdit] = struct{ total, ok int }{2 * editOrders, 2 * editOrders} }

// TestOrderEditLosesNoEditWithIfMatch: two clients edit the same orders
// through two replica processes. Naive, a PUT of the order as read erases
// the other client's edit (the race window is real: some edits are lost);
// with httpver's If-Match the later PUT is 412 and redone, and every
// order ends with both edits.
func TestOrderEditLosesNoEditWithIfMatch(t *testing.T) {
	got := runDemo(t)[orderEdit]
	naive, cond := got["naive"], got[strategyIfMat]
	if naive.anomalies == 0 {
		t.Errorf("naive: no edit lost; the race window is not real")
	}
	if cond.anomalies != 0 || cond.stats.Successes != 2*editOrders || cond.stats.Errors != 0 {
		t.Errorf("%s: %d lost edits, %d of %d edits, %d errors (%s)", strategyIfMat, cond.anomalies,
			cond.stats.Successes, 2*editOrders, cond.stats.Errors, cond.stats.ErrSample)
	}
	if cond.stats.Conflicts == 0 {
		t.Errorf("%s: no PUT was answered 412, so no edit was ever at risk", strategyIfMat)
	}
	t.Logf("naive lost %d edits; %s lost none, after %d 412s", naive.anomalies, strategyIfMat, cond.stats.Conflicts)
}
