// Package gormplugin is a GORM plugin that makes every write of a model with
// a lock:"version" field an optimistic-lock check and version bump, and runs
// GORM transactions under advisory locks.
package gormplugin
