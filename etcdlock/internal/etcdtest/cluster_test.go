package etcdtest_test

import (
	"context"
	"testing"

	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
)

// TestKilledLeaderIsReplaced: with the leader killed, the two members left
// elect one of themselves, and a write committed before the kill is
// served by the new leader; the old leader restarts with its data and
// rejoins.
func TestKilledLeaderIsReplaced(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	cl := c.Client(t)
	if _, err := cl.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := old.PID()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	if old.PID() != 0 {
		t.Fatalf("killed member %s (pid %d) still has a pid", old.Name, pid)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == old {
		t.Fatalf("the killed member %s is still the leader", old.Name)
	}
	got, err := c.Client(t, leader.ClientURL).Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "before" {
		t.Fatalf("new leader %s serves %v, %v; want k=before", leader.Name, got, err)
	}
	if _, err := cl.Put(ctx, "k", "after"); err != nil {
		t.Fatalf("put with two of three members: %v", err)
	}
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Serializable: the restarted member's own copy, caught up from the
	// others.
	oc := c.Client(t, old.ClientURL)
	eventually(t, "the restarted member serving k=after", func(ctx context.Context) bool {
		got, err := oc.Get(ctx, "k", serializable)
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		return err == nil && len(got.Kvs) == 1 && string(got.Kvs[0].Value) == "after"
	})
}

// TestRestartOfTheWholeClusterKeepsData: every member killed, then all
// started again from their directories: the data and the revision counter
// are where they were, and the next write's revision is greater.
func TestRestartOfTheWholeClusterKeepsData(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	cl := c.Client(t)
	put, err := cl.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KillAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := cl.Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after the restart: %v, %v; want k=v at revision %d", got, err, put.Header.Revision)
	}
	again, err := cl.Put(ctx, "k2", "v")
	if err != nil {
		t.Fatal(err)
	}
	if again.Header.Revision <= put.Header.Revision {
		t.Fatalf("revision %d after the restart, not above %d before it", again.Header.Revision, put.Header.Revision)
	}
}

// TestPausedMemberResumes: with a follower stopped by SIGSTOP the others
// commit writes; after SIGCONT it serves them.
func TestPausedMemberResumes(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Others(leader)[0]
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client(t, leader.ClientURL).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put with one member paused: %v", err)
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	mc := c.Client(t, m.ClientURL)
	eventually(t, "the resumed member serving k", func(ctx context.Context) bool {
		got, err := mc.Get(ctx, "k", serializable)
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		return err == nil && len(got.Kvs) == 1
	})
}
