package schedlag

import (
	"testing"
	"time"
)

// Stop ends the sampler: what it measured stops changing, and a second
// Stop returns the same.
func TestStopEndsTheSampler(t *testing.T) {
	w := Start()
	time.Sleep(20 * time.Millisecond)
	if got := w.Stop(); got < 0 {
		t.Fatalf("negative lateness %v", got)
	}
	before := w.Latest()
	time.Sleep(20 * time.Millisecond)
	if w.Latest() != before {
		t.Fatal("the sampler ran after Stop")
	}
	if w.Stop() != before {
		t.Fatal("a second Stop changed the result")
	}
}
