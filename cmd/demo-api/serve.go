package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/serving"
)

// serve runs the API until ctx ends, then shuts down gracefully: it stops
// accepting, lets in-flight requests finish (their finish runs on a context of
// its own), stops the sweeper and the dispatcher, and returns nil.
func serve(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	logger := cfg.logger(stderr)
	var pprofLn net.Listener // refused before anything starts when it is not on this machine
	if cfg.pprofAddr != "" {
		var err error
		if pprofLn, err = serving.ListenPprof(cfg.pprofAddr); err != nil {
			return err
		}
		defer pprofLn.Close()
	}
	store, closeDB, err := openStore(ctx, cfg, postgres.KeyStatements)
	if err != nil {
		return err
	}
	defer closeDB()
	// The sweeper's and the dispatcher's batches run on a pool of their
	// own, with the long bound.
	chores, closeChores, err := openStore(ctx, cfg, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer closeChores()
	tokens, _ := auth.Parse(cfg.tokens) // checked by loadConfig; none in a room without API_TOKENS
	m := metrics.New(store, logger)
	disp := dispatcher(cfg, chores, logger, m.Outbox(store, logger))

	repl := &replicationWatch{logger: logger, read: store.Replication, gauge: m.CommitWaits}
	repl.check(ctx) // says at start whether a commit waits for a synchronous standby
	deps := httpapi.Deps{
		Logger:      logger,
		Keys:        store,
		Demo:        &demo.Service{Store: store, RefusedTopics: cfg.refused()},
		Writes:      store,
		Deliveries:  disp,
		Tokens:      tokens,
		Ready:       store.Ping,
		Replication: repl.latest,
		TTL:         cfg.ttl,
		Lease:       cfg.lease,
		Workshop:    cfg.workshop,
		Room:        cfg.room,
		Metrics:     m,
		Path:        idempotency.Path(cfg.path),

		NewKeysPerSecond: cfg.newKeysPerSecond,
		NewKeysBurst:     cfg.newKeysBurst,
	}
	// demo-only{ the expedite
	if disp.Desk != nil {
		deps.Desk, deps.Expedites = disp.Desk, store
	}
	// }demo-only
	if cfg.workshop && disp.Desk != nil {
		deps.DeskFaults = deskFaults(disp.Desk)
	}
	handler, err := httpapi.NewServer(deps)
	if err != nil {
		return err
	}
	ln, err := listen(cfg.listenAddr, "LISTEN_ADDR")
	if err != nil {
		return err
	}
	srv := cfg.httpServer(handler, logger)

	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { sweep(sweepCtx, logger, chores, cfg.sweepInterval, cfg.sweepBatch, m.Swept) })
	wg.Go(func() { repl.run(sweepCtx) })
	defer func() { stopSweep(); wg.Wait() }()
	if disp.Desk != nil && cfg.dispatch {
		wg.Go(func() { disp.Run(sweepCtx) })
	}
	// demo-only{ the expedite's completer
	if disp.Desk != nil {
		runner, ops, err := completer(cfg, chores, disp.Desk, m.Outcome)
		if err != nil {
			return err
		}
		wg.Go(func() { complete(sweepCtx, logger, runner, ops, cfg.completeInterval) })
	}
	// }demo-only

	logger.Info("serving", "addr", ln.Addr().String(), "workshop", cfg.workshop, "room", cfg.room, "actors", len(tokens),
		"ttl", cfg.ttl, "lease", cfg.lease, "path", cfg.path, "unprepared", store.Unprepared,
		"new_keys_per_second", cfg.newKeysPerSecond, "new_keys_burst", cfg.newKeysBurst,
		"provider", cfg.providerURL, "dispatch", disp.Desk != nil && cfg.dispatch)
	if cfg.workshop && !loopback(ln.Addr()) {
		logger.Warn("workshop knobs are on and the server listens beyond this machine: "+
			"anyone who reaches it may hold, fail or drop requests; listen on 127.0.0.1 unless that is meant",
			"addr", ln.Addr().String())
	}
	if cfg.room {
		logger.Warn("WORKSHOP_ROOM is on: any bearer token dev-<name> is accepted as the participant dev-<name>, "+
			"with no secret; anyone who reaches the server may act as any participant. Only for a workshop", "addr", ln.Addr().String())
	}
	fmt.Fprintf(stdout, "demo-api listening on http://%s\n", ln.Addr())
	if pprofLn != nil {
		// After the line above, which tools read first (cmd/demo-bench).
		fmt.Fprintf(stdout, "demo-api pprof on http://%s/debug/pprof/\n", pprofLn.Addr())
		wg.Go(func() { serving.ServePprof(sweepCtx, logger, pprofLn) })
	}
	page := pageAddr(ln.Addr().(*net.TCPAddr))
	fmt.Fprintf(stdout, "demo-api in a browser: http://%s/ (create) and http://%s/workshop\n", page, page)
	if cfg.room {
		printJoin(stdout, ln.Addr().(*net.TCPAddr), cfg.providerURL)
	}

	return serving.Serve(ctx, logger, srv, ln, cfg.shutdownTimeout)
}

// pageAddr is the address a person on this machine opens the pages at: a
// server on every interface is reached at localhost too.
func pageAddr(a *net.TCPAddr) string {
	if a.IP.IsUnspecified() {
		return net.JoinHostPort("localhost", strconv.Itoa(a.Port))
	}
	return a.String()
}

// printJoin tells a workshop room how to join a server listening at a: the
// page to open, and the line each participant pastes first in a terminal,
// ending it with a name of their own (the README's blocks read API, DESK
// and ME). The review desk is at providerURL; when that is this machine's
// loopback and the API listens beyond it, participants reach the desk at
// the API's address and the desk's port, where make run's room opens it.
func printJoin(w io.Writer, a *net.TCPAddr, providerURL string) {
	hosts := []string{a.IP.String()}
	if a.IP.IsUnspecified() {
		hosts = nil
		addrs, _ := net.InterfaceAddrs()
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				hosts = append(hosts, ipn.IP.String())
			}
		}
		if len(hosts) == 0 {
			hosts = []string{"localhost"}
		}
	}
	desk, _ := url.Parse(providerURL)
	deskLocal := desk != nil && desk.Host != "" && (desk.Hostname() == "localhost" || net.ParseIP(desk.Hostname()).IsLoopback())
	fmt.Fprintf(w, "demo-api room: open the page, or paste the line under it in a terminal and end it with a name of your own "+
		"(lowercase letters, digits, '.', '_' or '-': not $(whoami), which lab machines share):\n")
	for _, h := range hosts {
		api := "http://" + net.JoinHostPort(h, strconv.Itoa(a.Port))
		line := "API=" + api
		switch {
		case desk == nil || desk.Host == "":
		case deskLocal && !loopback(a):
			line += " DESK=http://" + net.JoinHostPort(h, desk.Port())
		default:
			line += " DESK=" + strings.TrimSuffix(providerURL, "/")
		}
		fmt.Fprintf(w, "demo-api room: join at %s/workshop\n%s ME=\n", api, line)
	}
	if deskLocal && !loopback(a) {
		fmt.Fprintf(w, "demo-api room: DESK is the review desk on port %s of the same address: it must listen there too "+
			"(make run's room opens it; else PROVIDER_LISTEN_ADDR=0.0.0.0:%s demo-api provider)\n", desk.Port(), desk.Port())
	}
	fmt.Fprintf(w, "demo-api room: each participant's token is %s<name>: Authorization: Bearer dev-$ME\n", auth.RoomTokenPrefix)
}

// deskFaults sets the desk's fault knobs for the workshop page, within 5 s.
func deskFaults(desk *reviewdesk.Client) func(context.Context, json.RawMessage) error {
	return func(ctx context.Context, faults json.RawMessage) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := desk.SetFaults(ctx, faults)
		refused, isRefused := errors.AsType[*reviewdesk.RefusedError](err)
		switch {
		case errors.Is(err, reviewdesk.ErrFaultsDisabled):
			return apperr.Errorf(apperr.WorkshopDisabled, "the review desk refuses its fault knobs: start it with PROVIDER_FAULTS=true (make run does)")
		case isRefused:
			// A refusal is an answer: the same faults again cannot pass.
			return apperr.Errorf(apperr.InvalidField, "the review desk refused these faults: %s", refused.Detail)
		case err != nil:
			return &apperr.Error{Code: apperr.Unavailable, Message: "the review desk did not take the faults", RetryAfter: time.Second, Err: err}
		}
		return nil
	}
}

// openStore opens cfg's database with statements bounded by
// statementTimeout, brings its schema up to date, and returns its store and
// how to close it.
func openStore(ctx context.Context, cfg config, statementTimeout time.Duration) (*postgres.Store, func() error, error) {
	db, err := cfg.openDB(ctx, statementTimeout)
	if err != nil {
		return nil, nil, err
	}
	if err := postgres.Migrate(db, 0); err != nil {
		db.Close()
		return nil, nil, migrateHint(err)
	}
	return postgres.New(db), db.Close, nil
}

// openDB opens cfg's database with statements bounded by statementTimeout,
// as a pooler in transaction mode when DATABASE_UNPREPARED says so.
func (c config) openDB(ctx context.Context, statementTimeout time.Duration) (*sqlx.DB, error) {
	return postgres.OpenWith(ctx, c.databaseURL, postgres.Options{StatementTimeout: statementTimeout, Pooled: c.unprepared})
}

// migrateHint says what to do when migrations cannot run through the
// pooler DATABASE_URL reaches.
func migrateHint(err error) error {
	if errors.Is(err, postgres.ErrMigrateNeedsDirectURL) {
		return fmt.Errorf("%w: `demo-api migrate up` with DATABASE_URL set to PostgreSQL itself, then start this again", err)
	}
	return err
}

// loopback reports whether addr can be reached only from this machine.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
