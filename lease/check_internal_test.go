package lease

import (
	"errors"
	"testing"
	"time"
)

func TestTTLShorterThanEightMeasuredRoundTripsIsRefused(t *testing.T) {
	m := &Manager{}
	if err := m.check("x", MinTTL); err != nil {
		t.Fatalf("MinTTL before any round trip was measured: %v", err)
	}
	// The first round trips of a new pool include dialing: until a few
	// were measured, one slow one refuses nothing.
	m.observeRTT(300 * time.Millisecond)
	if err := m.check("x", time.Second); err != nil {
		t.Fatalf("a 1 s TTL after one slow round trip (a dial): %v", err)
	}
	for range rttSamples - 1 {
		m.observeRTT(10 * time.Millisecond)
	}
	if err := m.check("x", 79*time.Millisecond); err == nil {
		t.Fatal("a TTL of under 8 measured round trips was accepted")
	}
	if err := m.check("x", 80*time.Millisecond); err != nil {
		t.Fatalf("a TTL of 8 round trips: %v", err)
	}
	if _, err := m.acquire(t.Context(), "acquire", "x", 20*time.Millisecond, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("acquire: %v, want ErrInvalid", err)
	}
}
