// Command demo-api serves the idempotent create API and runs its chores:
//
//	demo-api serve            run the HTTP API (migrates first) and the sweeper
//	demo-api migrate up|down  apply or roll back the schema
//	demo-api purge-expired    delete expired idempotency records once
//	demo-api resume-run       resume a run of several steps that needs attention // demo-only
//	demo-api hash-token TOKEN print the SHA-256 that API_TOKENS holds for TOKEN
//	demo-api sql [NAME]       print the statements composed at start-up
//	demo-api provider         run the review desk (the external service) // demo-only
//	demo-api dispatch         hand accepted requests to the review desk
//	demo-api send             create a demo request through the retrying client
//	demo-api conformance      check any Idempotency-Key API from the outside
//	demo-api healthcheck      exit 0 when the serve on LISTEN_ADDR answers /healthz
//	demo-api workshop         walk through every branch against a running server // demo-only
//
// Configuration comes from environment variables; each has a flag of the
// same meaning (see config.go).
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

	"github.com/demo-api/demo-api/internal/auth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo-api:", err)
		if e, ok := errors.AsType[*exitError](err); ok {
			os.Exit(e.code)
		}
		os.Exit(1)
	}
}

const usage = `usage: demo-api <command> [flags]

commands:
  serve               run the HTTP API and the sweeper (applies migrations first)
  migrate up|down     apply all migrations, or roll back the last one
  purge-expired       delete expired idempotency records, then exit
  resume-run          resume a run of several steps that needs attention (--actor, --operation, --key) // demo-only
  hash-token TOKEN    print the SHA-256 of TOKEN, as API_TOKENS holds it
  sql [NAME]          print the statements composed of a key row's part and an operation's effect
  provider            run the review desk, the external service requests are handed to // demo-only
  dispatch            hand accepted requests to the review desk (serve does it too)
  send                create a demo request through the retrying Go client (api/client)
  conformance         check an Idempotency-Key API (this one or any other) from the outside, each branch
  healthcheck         exit 0 when the serve on LISTEN_ADDR answers /healthz (the image's HEALTHCHECK)
  workshop            walk through every branch of the contract against a running server // demo-only

run "demo-api <command> -h" for the flags and environment variables.`

// run is the whole program; main only wires it to the process. A command's
// -h prints its flags to stdout and is no error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := runCommand(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		cfg, err := loadConfig(cmd, args, getenv, stdout, stderr)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stdout, stderr)
	case "migrate":
		direction := ""
		if len(args) > 0 && (args[0] == "up" || args[0] == "down") {
			direction, args = args[0], args[1:]
		} else if !wantsHelp(args) {
			return errors.New(commandUsage[cmd])
		}
		cfg, err := loadConfig(cmd, args, getenv, stdout, stderr)
		if err != nil {
			return err
		}
		return migrateCmd(ctx, cfg, direction, stdout)
	case "dispatch":
		cfg, err := loadConfig(cmd, args, getenv, stdout, stderr)
		if err != nil {
			return err
		}
		return dispatch(ctx, cfg, stdout, stderr)
	case "purge-expired":
		cfg, err := loadConfig(cmd, args, getenv, stdout, stderr)
		if err != nil {
			return err
		}
		return purgeCmd(ctx, cfg, stdout)
	case "resume-run": // demo-only
		return resumeRunCmd(ctx, args, getenv, stdout, stderr) // demo-only
	case "workshop": // demo-only
		return workshopCmd(ctx, args, stdout) // demo-only
	case "send":
		return sendCmd(ctx, args, stdout, stderr)
	case "conformance":
		return conformanceCmd(ctx, args, stdout)
	case "healthcheck":
		return healthcheckCmd(ctx, args, getenv, stdout, stderr)
	case "provider": // demo-only
		return providerCmd(ctx, args, getenv, stdout, stderr) // demo-only
	case "hash-token":
		const hashUsage = "usage: demo-api hash-token TOKEN\n\nPrints the hex SHA-256 of TOKEN, as API_TOKENS holds it (actor:sha256hex,…)."
		if wantsHelp(args) {
			fmt.Fprintln(stdout, hashUsage)
			return nil
		}
		if len(args) != 1 {
			return errors.New("usage: demo-api hash-token TOKEN")
		}
		fmt.Fprintln(stdout, auth.Hash(args[0]))
		return nil
	case "sql":
		return sqlCmd(args, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// wantsHelp reports whether args ask for help, as the flag package reads it.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--h", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}
