// Command withpg runs a command with one throw-away PostgreSQL for all of
// it, named in TEST_DATABASE_URL, and stops the server when the command
// ends:
//
//	go run ./internal/tools/pgtest/withpg go test -short ./...
//
// Every test package then clones its databases from the one server
// (pgtest.Main uses TEST_DATABASE_URL) instead of starting a cluster of
// its own, which costs an initdb and a migration per package. Tests that
// need a server of their own (restarts, a standby) skip under
// TEST_DATABASE_URL, saying why, or under -short. With TEST_DATABASE_URL
// already set, withpg runs the command on that server. It exits with the
// command's status.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg command [args...]")
		return 2
	}
	env := os.Environ()
	if os.Getenv("TEST_DATABASE_URL") == "" {
		// Every package's tests connect to it at once: room for them.
		pg, err := pgtest.Start(context.Background(), pgtest.Options{Settings: map[string]string{"max_connections": "1000"}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "withpg:", err)
			return 1
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "withpg: stopping PostgreSQL:", err)
			}
		}()
		fmt.Fprintf(os.Stderr, "withpg: one PostgreSQL for the run, from %s\n", pg.Source)
		env = append(env, "TEST_DATABASE_URL="+pg.URL("postgres"))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	// Ctrl-C reaches the command too (its process group): wait for it to
	// end, then stop the server.
	signal.Ignore(os.Interrupt)
	if err := cmd.Run(); err != nil {
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "withpg:", err)
		return 1
	}
	return 0
}
