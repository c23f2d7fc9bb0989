// Package service is the program of demo-api: its commands and their
// configuration; a service built on it (demo/) adds an Extension.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// Extension is what a service built on this one adds to the program.
type Extension struct {
	Commands   []Command
	Settings   func(s *Settings)                           // more settings of serve and dispatch
	Serve      func(ctx context.Context, s *Serving) error // adds to serve and dispatch once the schema is current
	Migrations *Migrations                                 // applied after the template's, taken down before them
	// Authenticate, if set, returns serve's check of the tokens API_TOKENS
	// does not hold (nil: none); with a check, API_TOKENS may be empty.
	Authenticate func(c Config, tokens auth.Tokens) (func(token string) (actor string, err error), error)
}

// Migrations are golang-migrate files at the root of FS, with their own table.
type Migrations struct {
	FS    fs.FS
	Table string
}

// Command is one more command of the program.
type Command struct {
	Name  string
	Usage string // its line in the program's usage
	Run   func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

// Serving is what serve and dispatch have made, for an Extension to add to.
type Serving struct {
	Config    Config
	Logger    *slog.Logger
	Store     *postgres.Store // the requests' pool
	Chores    *postgres.Store // the pool of the chores' batches (the long statement bound)
	Metrics   *metrics.Metrics
	Desk      *reviewdesk.Client                // nil without PROVIDER_URL
	Stdout    io.Writer                         // where the command prints its lines
	Deps      *httpapi.Deps                     // the API's, in serve only (nil in dispatch)
	Chore     func(f func(ctx context.Context)) // runs f beside serve or dispatch until they stop
	Listening func(addr *net.TCPAddr)           // if set, called once serve listens at addr
}

// Main runs the program with args (the command and its flags); -h is no error.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ext *Extension) error {
	err := runCommand(ctx, args, getenv, stdout, stderr, ext)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// ParseFlags parses a command's args into fs; -h prints usage and the flags
// to stdout and returns flag.ErrHelp.
func ParseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage+"\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	return err
}

// Exit runs Main as the process: SIGINT or SIGTERM stops it gracefully, and
// its error sets the exit status.
func Exit(ext *Extension) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, ext)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-api:", err)
		if e, ok := errors.AsType[*ExitError](err); ok {
			os.Exit(e.Code)
		}
		os.Exit(1)
	}
}

const usageFormat = `usage: demo-api <command> [flags]

commands:
  serve               run the HTTP API and the sweeper (applies migrations first)
  migrate up|down     apply all migrations, or roll back the last one
  purge-expired       delete expired idempotency records, then exit
  hash-token TOKEN    print the SHA-256 of TOKEN, as API_TOKENS holds it
  dispatch            hand the outbox's events to the other system, PROVIDER_URL (serve does it too)
  send                send one create through the retrying Go client (api/client)
  healthcheck         exit 0 when the serve on LISTEN_ADDR answers /healthz (the image's HEALTHCHECK)
%s
run "demo-api <command> -h" for the flags and environment variables.`

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ext *Extension) error {
	if ext == nil {
		ext = &Extension{}
	}
	var more strings.Builder
	for _, c := range ext.Commands {
		fmt.Fprintf(&more, "  %-19s %s\n", c.Name, c.Usage)
	}
	usage := fmt.Sprintf(usageFormat, more.String())
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("no command")
	}
	cmd, args := args[0], args[1:]
	for _, c := range ext.Commands {
		if c.Name == cmd {
			return c.Run(ctx, args, getenv, stdout, stderr)
		}
	}
	switch cmd {
	case "serve", "migrate", "dispatch", "purge-expired":
		direction := ""
		if cmd == "migrate" && len(args) > 0 && (args[0] == "up" || args[0] == "down") {
			direction, args = args[0], args[1:]
		}
		cfg, err := loadConfig(cmd, args, getenv, stdout, stderr, ext)
		if err != nil {
			return err
		}
		switch {
		case cmd == "serve":
			return serve(ctx, cfg, stdout, stderr, ext)
		case cmd == "migrate" && direction == "":
			return errors.New(commandUsage[cmd])
		case cmd == "migrate":
			return migrateCmd(ctx, cfg, direction, stdout, ext)
		case cmd == "dispatch":
			return dispatch(ctx, cfg, stdout, stderr, ext)
		}
		return purgeCmd(ctx, cfg, stdout)
	case "send":
		return sendCmd(ctx, args, stdout)
	case "healthcheck":
		return healthcheckCmd(args, getenv, stdout)
	case "hash-token":
		const hashUsage = "usage: demo-api hash-token TOKEN\n\nPrints the hex SHA-256 of TOKEN, as API_TOKENS holds it (actor:sha256hex,…)."
		if len(args) == 1 && slices.Contains([]string{"-h", "-help", "--h", "--help"}, args[0]) {
			fmt.Fprintln(stdout, hashUsage)
			return nil
		}
		if len(args) != 1 {
			return errors.New("usage: demo-api hash-token TOKEN")
		}
		fmt.Fprintln(stdout, auth.Hash(args[0]))
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
