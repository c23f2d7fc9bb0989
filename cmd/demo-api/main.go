// Command demo-api serves the idempotent create API and runs its chores.
// Its main builds the program from the service's packages: run reads the
// command, and serve composes the API from the store, the transport and
// the chores.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-api:", err)
		os.Exit(service.ExitCode(err))
	}
}

const usage = `usage: demo-api <command> [flags]

commands:
  serve               run the HTTP API and the sweeper (applies migrations first)
  migrate up|down     apply all migrations, or roll back the last one
  purge-expired       delete expired idempotency records, then exit
  hash-token TOKEN    print the SHA-256 of TOKEN, as API_TOKENS holds it
  dispatch            hand the outbox's events to the other system, PROVIDER_URL (serve does it too)
  send                send one create through the retrying Go client (api/client)
  healthcheck         exit 0 when the serve on LISTEN_ADDR answers /healthz (the image's HEALTHCHECK)

run "demo-api <command> -h" for the flags and environment variables.`

// run runs the command args[0] with the flags after it; -h is no error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := command(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func command(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve", "dispatch", "migrate", "purge-expired":
		direction := ""
		if cmd == "migrate" && len(args) > 0 && (args[0] == "up" || args[0] == "down") {
			direction, args = args[0], args[1:]
		}
		var cfg service.Config
		if err := service.NewSettings(cmd, &cfg).Parse(args, getenv, stdout, stderr); err != nil {
			return err
		}
		switch cmd {
		case "serve":
			return serve(ctx, cfg, stdout, stderr)
		case "dispatch":
			return dispatch(ctx, cfg, stdout, stderr)
		case "migrate":
			return migrate(ctx, cfg, direction, stdout)
		}
		return service.Purge(ctx, cfg, stdout)
	case "send":
		return service.Send(ctx, args, stdout)
	case "healthcheck":
		return service.Healthcheck(args, getenv, stdout)
	case "hash-token":
		return service.HashToken(args, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// serve runs the API and its chores until ctx ends, then stops gracefully.
func serve(ctx context.Context, cfg service.Config, stdout, stderr io.Writer) error {
	tokens, err := cfg.Tokens()
	if err != nil {
		return err
	}
	app, err := service.Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer app.Close()
	svc := &demo.Service{Store: app.Store, RefusedTopics: cfg.Refused()}
	api, err := httpapi.NewServer(app.Deps(svc, tokens))
	if err != nil {
		return err
	}
	ln, err := service.Listen(cfg.ListenAddr, "LISTEN_ADDR")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "demo-api listening on http://%s\n", ln.Addr())
	return app.Serve(ctx, ln, api)
}

// dispatch hands the outbox's events to the other system until ctx ends.
func dispatch(ctx context.Context, cfg service.Config, stdout, stderr io.Writer) error {
	app, err := service.Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer app.Close()
	return app.Dispatch(ctx, stdout)
}

// migrate applies every migration (up) or rolls back the last (down).
func migrate(ctx context.Context, cfg service.Config, direction string, stdout io.Writer) error {
	if direction == "" {
		return errors.New("usage: demo-api migrate up|down [flags]")
	}
	db, err := cfg.OpenDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := service.Migrate(ctx, db, direction, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrate %s: done\n", direction)
	return nil
}
