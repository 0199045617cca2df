package redistest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

const childEnv = "REDISTEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A test binary that starts a server, says where, and waits to be
		// killed.
		s, err := redistest.Start(context.Background(), redistest.Options{})
		if err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		fmt.Printf("%d %s\n", s.PID(), s.Dir())
		select {}
	}
	os.Exit(m.Run())
}

// TestKillLosesDataWithoutPersistence: a killed server without persistence
// comes back empty on the same address; with Persist it comes back with
// every acknowledged write.
func TestKillLosesDataWithoutPersistence(t *testing.T) {
	ctx := context.Background()
	for _, persist := range []bool{false, true} {
		t.Run(fmt.Sprintf("persist=%t", persist), func(t *testing.T) {
			s := redistest.New(t, redistest.Options{Persist: persist})
			c := s.Client(t, nil)
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("a killed server answered")
			}
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, "k").Result()
			if persist && (err != nil || got != "v") || !persist && !errors.Is(err, redis.Nil) {
				t.Fatalf("after restart: %q, %v", got, err)
			}
		})
	}
}

// TestPauseStopsAnswers: a paused server answers nothing until resumed.
func TestPauseStopsAnswers(t *testing.T) {
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, func(o *redis.Options) { o.ReadTimeout = 100 * time.Millisecond; o.MaxRetries = -1 })
	ctx := context.Background()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a paused server answered")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestNoServerOutlivesAKilledTestBinary: a test binary that started a
// server is killed with SIGKILL; its watchdog kills the server and removes
// the directory.
func TestNoServerOutlivesAKilledTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child said nothing")
	}
	f := strings.Fields(sc.Text())
	pid, err := strconv.Atoi(f[0])
	if err != nil || len(f) != 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q", sc.Text())
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil || dirExists(f[1]) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %d or %s still there 10 s after the test binary was killed", pid, f[1])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dirExists(d string) bool {
	_, err := os.Stat(d)
	return err == nil
}
