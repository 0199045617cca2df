// Command withpg starts one throwaway PostgreSQL cluster, runs a command
// with DATABASE_URL pointing at it, then stops the cluster and exits with
// the command's status. make test uses it so that every package's test
// binary shares one server instead of starting its own.
//
//	go run ./internal/testing/pgtest/cmd/withpg [-set name=value]... -- go test ./...
//
// When DATABASE_URL is already set, the command runs against that server
// and nothing is started.
//
// With -mariadb it also starts one throwaway MariaDB (internal/testing/mariatest)
// and sets MYSQL_URL for the command, unless MYSQL_URL is set already, so
// that the test binaries that test on MariaDB share one server too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

type settings map[string]string

func (s settings) String() string { return fmt.Sprint(map[string]string(s)) }
func (s settings) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return errors.New("want name=value")
	}
	s[k] = val
	return nil
}

func main() {
	set := settings{}
	flag.Var(set, "set", "server setting name=value (repeatable)")
	maria := flag.Bool("mariadb", false, "also start a MariaDB and set "+mariatest.EnvDSN)
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg [-set name=value]... [-mariadb] -- command [args...]")
		os.Exit(2)
	}
	os.Exit(run(args, set, *maria))
}

func run(args []string, set settings, maria bool) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	if maria && os.Getenv(mariatest.EnvDSN) == "" {
		s, err := mariatest.Start(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "withpg:", err)
			return 1
		}
		defer s.Close()
		fmt.Fprintf(os.Stderr, "withpg: MariaDB at %s\n", s.AdminDSN())
		cmd.Env = append(cmd.Env, mariatest.EnvDSN+"="+s.AdminDSN())
	}
	if os.Getenv(pgtest.EnvDSN) == "" {
		c, err := pgtest.StartCluster(context.Background(), pgtest.Options{Settings: set})
		if err != nil {
			fmt.Fprintln(os.Stderr, "withpg:", err)
			return 1
		}
		defer c.Close()
		fmt.Fprintf(os.Stderr, "withpg: PostgreSQL on 127.0.0.1:%d (socket %s)\n", c.Port(), c.SocketDir())
		cmd.Env = append(cmd.Env, pgtest.EnvDSN+"="+c.AdminDSN())
	}
	// A terminal's Ctrl-C reaches the child through the process group; a
	// signal sent to us alone is forwarded. Either way we wait for the child
	// and then stop the cluster.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		return 1
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if code := exit.ExitCode(); code > 0 {
				return code
			}
			return 1
		}
		fmt.Fprintln(os.Stderr, "withpg:", err)
		return 1
	}
	return 0
}
