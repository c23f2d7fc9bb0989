// Command withpg runs a command (go test -short ./...) with one throw-away
// PostgreSQL in TEST_DATABASE_URL, unless set, for every test package, and
// exits with the command's status.
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
	// Ctrl-C reaches the command too: wait for it, then stop the server.
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
