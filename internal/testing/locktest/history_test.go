package locktest

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestConformanceHistoryModelRejectsBrokenLocks makes sure the history's
// model can fail: a grant while the lock is held, a token not above an
// earlier one, a stale fenced write that succeeded, a refused release of a
// held lock and a successful release of a lock taken over are illegal;
// the same histories with the fault in place, or the write refused, are
// not.
func TestConformanceHistoryModelRejectsBrokenLocks(t *testing.T) {
	op := func(c int, call, ret int64, in opIn, out opOut) porcupine.Operation {
		in.client = c
		return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: in, Output: out}
	}
	acq := func(c int, call int64, tok int64) porcupine.Operation {
		return op(c, call, call+1, opIn{kind: opAcquire}, opOut{ok: true, token: tok})
	}
	lose := func(c int, call int64) porcupine.Operation {
		return op(c, call, call+1, opIn{kind: opLose}, opOut{ok: true})
	}
	write := func(c int, call int64, tok int64, ok bool) porcupine.Operation {
		return op(c, call, call+1, opIn{kind: opWrite, token: tok, value: c + 1}, opOut{ok: ok})
	}
	rel := func(c int, call int64, tok int64, ok bool) porcupine.Operation {
		return op(c, call, call+1, opIn{kind: opRelease, token: tok}, opOut{ok: ok})
	}
	cases := []struct {
		name   string
		fenced bool
		ops    []porcupine.Operation
		legal  bool
	}{
		{"two holders", false, []porcupine.Operation{acq(0, 0, 0), acq(1, 10, 0)}, false},
		{"two holders after a fault", false, []porcupine.Operation{acq(0, 0, 0), lose(0, 5), acq(1, 10, 0)}, true},
		{"a token not above the last", true, []porcupine.Operation{acq(0, 0, 5), lose(0, 5), acq(1, 10, 5)}, false},
		{"a stale write succeeded", true, []porcupine.Operation{acq(0, 0, 1), lose(0, 2), acq(1, 4, 2), write(1, 6, 2, true), write(0, 8, 1, true)}, false},
		{"a stale write refused", true, []porcupine.Operation{acq(0, 0, 1), lose(0, 2), acq(1, 4, 2), write(1, 6, 2, true), write(0, 8, 1, false)}, true},
		{"a held lock's release refused", true, []porcupine.Operation{acq(0, 0, 1), rel(0, 2, 1, false)}, false},
		{"a taken-over lock's release succeeded", true, []porcupine.Operation{acq(0, 0, 1), lose(0, 2), acq(1, 4, 2), rel(0, 6, 1, true)}, false},
		{"a taken-over lock's release refused", true, []porcupine.Operation{acq(0, 0, 1), lose(0, 2), acq(1, 4, 2), rel(0, 6, 1, false)}, true},
	}
	for _, c := range cases {
		if got := porcupine.CheckOperations(historyModel(c.fenced), c.ops); got != c.legal {
			t.Errorf("%s: linearizable %t, want %t", c.name, got, c.legal)
		}
	}
}
