// Package promoted is a backend with no conformance test whose lock gets
// every method of sqlock.Lock from an embedded toolkit type.
package promoted

import "example.com/fixture/internal/base"

type Lease struct {
	*base.Hold
	name string
}

func (l *Lease) Name() string { return l.name }
