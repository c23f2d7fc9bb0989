// Command demo-api is the full worked example: the template's program
// built from the same packages plus the demo's own: the stand-in review
// desk, the expedite (an operation of several steps) and its completer, the
// pages and the workshop. Its commands are the template's and these:
//
//	demo-api provider         run the review desk, the external service
//	demo-api workshop         walk through every branch against a running server
//	demo-api resume-run       resume a run of several steps that needs attention
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/profiler"
	"github.com/demo-api/demo-api/demo/internal/room"
	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
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
  dispatch            hand accepted requests to the review desk (serve does it too)
  send                create a demo request through the retrying Go client (api/client)
  healthcheck         exit 0 when the serve on LISTEN_ADDR answers /healthz (the image's HEALTHCHECK)
  provider            run the review desk, the external service requests are handed to
  workshop            walk through every branch of the contract against a running server
  resume-run          resume a run of several steps that needs attention (--actor, --operation, --key)

run "demo-api <command> -h" for the flags and environment variables.`

// run runs the command args[0] with the flags after it; -h is no error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := command(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// settings are the demo's own settings of serve and dispatch, beside the
// template's.
type settings struct {
	completeInterval time.Duration
	inRoom           bool // WORKSHOP_ROOM
	pprofAddr        string
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
		var more settings
		s := service.NewSettings(cmd, &cfg)
		if cmd == "serve" || cmd == "dispatch" {
			s.Duration(&more.completeInterval, "COMPLETE_INTERVAL", "complete-interval", "1s",
				"how often the completer looks for expedites whose runner died or gave up")
			s.Bool(&more.inRoom, "WORKSHOP_ROOM", "workshop-room", false, "a workshop room: any bearer token dev-<name> is the participant dev-<name>, "+
				"and API_TOKENS may be empty (with WORKSHOP only; unsafe for anything but a workshop)")
			s.String(&more.pprofAddr, "PPROF_ADDR", "pprof-listen", "", "serve net/http/pprof on this address of this machine only, e.g. 127.0.0.1:6060 (serve only); empty: no profiler")
		}
		if err := s.Parse(args, getenv, stdout, stderr); err != nil {
			return err
		}
		switch cmd {
		case "serve":
			return serve(ctx, cfg, more, stdout, stderr)
		case "dispatch":
			return dispatch(ctx, cfg, more, stdout, stderr)
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
	case "provider":
		return providerCmd(ctx, args, getenv, stdout, stderr)
	case "workshop":
		return workshopCmd(ctx, args, stdout)
	case "resume-run":
		return resumeRunCmd(ctx, args, getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// serve runs the template's API with the demo's parts until ctx ends: the
// rule between a cancel and an expedite, the expedite's routes, its
// completer and the desk's fault knobs when there is a desk, the pages, a
// workshop room's participants and the profiler when asked.
func serve(ctx context.Context, cfg service.Config, more settings, stdout, stderr io.Writer) error {
	tokens, err := cfg.Tokens()
	var participants func(token string) (string, error)
	if more.inRoom {
		participants, err = room.Open(cfg.Workshop, tokens) // a room needs no API_TOKENS
	}
	if err != nil {
		return err
	}
	app, err := service.Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer app.Close()
	if err := migrateDemo(app.Store.DB()); err != nil {
		return err
	}
	store := expedite.NewStore(app.Store)
	svc := &demo.Service{Store: store, RefusedTopics: cfg.Refused()}
	deps := app.Deps(expedite.Service{Service: svc, Expedites: store}, tokens)
	deps.Authenticate = participants
	desk := deskOf(cfg)
	deskFaults := cfg.Workshop && desk != nil
	if desk != nil {
		deps.Routes = func(srv *httpapi.Server) ([]httpapi.Route, error) {
			routes, err := expedite.Routes(srv, deps, svc, store, desk, store)
			if deskFaults {
				routes = append(routes, httpapi.Route{Method: http.MethodPut, Pattern: "/workshop/desk-faults",
					Handler: web.DeskFaults(app.Logger, web.SetDeskFaults(desk))})
			}
			return routes, err
		}
		if err := startCompleter(app, desk, more.completeInterval); err != nil {
			return err
		}
	}
	api, err := httpapi.NewServer(deps)
	if err != nil {
		return err
	}
	pages := web.Handler(web.Config{Workshop: cfg.Workshop, Room: more.inRoom, TTL: cfg.TTL, Lease: cfg.Lease,
		DeskFaults: deskFaults, Expedite: desk != nil})
	var pprof net.Listener
	if more.pprofAddr != "" {
		if pprof, err = profiler.Listen(more.pprofAddr); err != nil {
			return err
		}
		app.Go(func(ctx context.Context) {
			if err := profiler.Serve(ctx, app.Logger, pprof); err != nil {
				app.Logger.Warn("pprof server stopped", "err", err)
			}
		})
	}
	ln, err := service.Listen(cfg.ListenAddr, "LISTEN_ADDR")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "demo-api listening on http://%s\n", ln.Addr())
	if pprof != nil {
		profiler.Announce(stdout, "demo-api", pprof)
	}
	addr := ln.Addr().(*net.TCPAddr)
	page := pageAddr(addr)
	fmt.Fprintf(stdout, "demo-api in a browser: http://%s/ (create) and http://%s/workshop\n", page, page)
	if more.inRoom {
		app.Logger.Warn("WORKSHOP_ROOM is on: any bearer token dev-<name> is accepted as the participant dev-<name>, "+
			"with no secret; anyone who reaches the server may act as any participant. Only for a workshop", "addr", addr.String())
		printJoin(stdout, addr, cfg.ProviderURL, localInterfaces())
	}
	return app.Serve(ctx, ln, withPages(api, pages))
}

// withPages serves the pages, which need no token, beside the API.
func withPages(api, pages http.Handler) http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"GET /{$}", "GET /workshop", "GET /ui/"} {
		mux.Handle(p, pages)
	}
	mux.Handle("/", api)
	return mux
}

// dispatch runs the template's dispatcher, and the completer of the
// expedites beside it, until ctx ends.
func dispatch(ctx context.Context, cfg service.Config, more settings, stdout, stderr io.Writer) error {
	app, err := service.Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer app.Close()
	if err := migrateDemo(app.Store.DB()); err != nil {
		return err
	}
	if err := startCompleter(app, deskOf(cfg), more.completeInterval); err != nil {
		return err
	}
	return app.Dispatch(ctx, stdout)
}

// startCompleter runs the completer of the expedites on the App's chores'
// pool every interval, beside serve or dispatch.
func startCompleter(app *service.App, desk *deskclient.Client, interval time.Duration) error {
	chores := expedite.NewStore(app.Chores)
	svc := &demo.Service{Store: chores, RefusedTopics: app.Config.Refused()}
	runner, ops, err := completer(app.Config, chores, svc, desk, app.Metrics.Outcome)
	if err != nil {
		return err
	}
	app.Go(func(ctx context.Context) { complete(ctx, app.Logger, runner, ops, interval) })
	return nil
}

// migrate applies the template's migrations, then the demo's (up), or rolls
// back the demo's last (down): a service's own schema goes first.
func migrate(ctx context.Context, cfg service.Config, direction string, stdout io.Writer) error {
	if direction == "" {
		return errors.New("usage: demo-api migrate up|down [flags]")
	}
	db, err := cfg.OpenDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if direction == "down" {
		err = postgres.MigrateFS(db, migrations.FS, ".", migrations.Table, -1)
	} else if err = service.Migrate(ctx, db, direction, stdout); err == nil {
		err = migrateDemo(db)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrate %s: done\n", direction)
	return nil
}

// migrateDemo brings the demo's own schema up to date, after the
// template's.
func migrateDemo(db *sqlx.DB) error {
	err := postgres.MigrateFS(db, migrations.FS, ".", migrations.Table, 0)
	if errors.Is(err, postgres.ErrMigrateNeedsDirectURL) {
		return fmt.Errorf("%w: run demo-api migrate with DATABASE_URL set to PostgreSQL itself", err)
	}
	return err
}

// deskOf is the demo's client of the review desk that serve hands requests
// to (PROVIDER_URL), for the expedite's calls and the desk's fault knobs;
// nil without a desk. Like the dispatcher's, it keeps a connection per call
// in flight.
func deskOf(cfg service.Config) *deskclient.Client {
	if cfg.ProviderURL == "" {
		return nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	return deskclient.New(cfg.ProviderURL, &http.Client{Transport: t})
}

// parseFlags parses a command's args into fs; -h prints usage and the flags
// to stdout and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage+"\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	return err
}

// newLogger is a log to w in format, json or text.
func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

// loopback reports whether addr can be reached only from this machine.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
