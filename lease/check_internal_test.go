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
	m.observeRTT(10 * time.Millisecond)
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
