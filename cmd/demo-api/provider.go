package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk/provider"
	"github.com/demo-api/demo-api/internal/serving"
)

const providerUsage = "usage: demo-api provider [flags]\n\nRuns the review desk, the external service the dispatcher hands accepted requests to.\nEach flag has an environment variable, named in its help; a flag wins.\n"

// providerCmd runs the review desk until ctx ends.
func providerCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-api provider", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dbURL := fs.String("database-url", "", "the review desk's own PostgreSQL URL ($PROVIDER_DATABASE_URL)")
	addr := fs.String("listen", cmp.Or(getenv("PROVIDER_LISTEN_ADDR"), ":8090"), "listen address ($PROVIDER_LISTEN_ADDR)")
	faults := fs.Bool("faults", false, "accept PUT /v1/faults, the fault knobs ($PROVIDER_FAULTS)")
	format := fs.String("log-format", cmp.Or(getenv("LOG_FORMAT"), "json"), "json or text ($LOG_FORMAT)")
	readTimeout, err := time.ParseDuration(cmp.Or(getenv("HTTP_READ_TIMEOUT"), "30s"))
	if err != nil {
		return fmt.Errorf("HTTP_READ_TIMEOUT: %w", err)
	}
	fs.DurationVar(&readTimeout, "read-timeout", readTimeout, "how long a request may take to arrive, headers and body ($HTTP_READ_TIMEOUT)")
	if v := getenv("PROVIDER_FAULTS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("PROVIDER_FAULTS: %q is not a boolean (use true or false)", v)
		}
		*faults = b
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, providerUsage+"\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return err
	}
	if *dbURL == "" {
		*dbURL = getenv("PROVIDER_DATABASE_URL")
	}
	if *dbURL == "" {
		return errors.New("set PROVIDER_DATABASE_URL (or -database-url) to the review desk's PostgreSQL URL")
	}
	cfg := config{logFormat: *format, readTimeout: readTimeout}
	logger := cfg.logger(stderr).With("service", "review-desk")
	db, err := postgres.Open(ctx, *dbURL, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := provider.Migrate(db); err != nil {
		return err
	}
	ln, err := listen(*addr, "PROVIDER_LISTEN_ADDR")
	if err != nil {
		return err
	}
	desk, err := provider.NewServer(db, logger, *faults)
	if err != nil {
		return err
	}
	srv := cfg.httpServer(desk.Handler(), logger) // the API's timeouts
	logger.Info("serving", "addr", ln.Addr().String(), "faults", *faults)
	fmt.Fprintf(stdout, "review desk listening on http://%s\n", ln.Addr())
	return serving.Serve(ctx, logger, srv, ln, 10*time.Second)
}
