package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/service"
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
	opts := provider.DefaultOptions()
	if v := getenv("PROVIDER_SLOT_HOLD"); v != "" {
		if opts.SlotHold, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("PROVIDER_SLOT_HOLD: %q is not a duration (e.g. 30s, 2m)", v)
		}
	}
	fs.DurationVar(&opts.SlotHold, "slot-hold", opts.SlotHold, "how long a reserved slot is held for its charge ($PROVIDER_SLOT_HOLD)")
	if v := getenv("PROVIDER_CREDIT"); v != "" {
		if opts.Credit, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("PROVIDER_CREDIT: %q is not a whole number", v)
		}
	}
	fs.IntVar(&opts.Credit, "credit", opts.Credit, "the credit an account starts with, on its first charge ($PROVIDER_CREDIT)")
	if v := getenv("PROVIDER_FAULTS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("PROVIDER_FAULTS: %q is not a boolean (use true or false)", v)
		}
		*faults = b
	}
	if err := parseFlags(fs, args, providerUsage, stdout); err != nil {
		return err
	}
	if *dbURL == "" {
		*dbURL = getenv("PROVIDER_DATABASE_URL")
	}
	if *dbURL == "" {
		return errors.New("set PROVIDER_DATABASE_URL (or -database-url) to the review desk's PostgreSQL URL")
	}
	opts.Faults = *faults
	if opts.SlotHold <= 0 || opts.SlotHold > provider.MaxSlotHold {
		return fmt.Errorf("PROVIDER_SLOT_HOLD (-slot-hold): %s is not more than 0 and up to %s", opts.SlotHold, provider.MaxSlotHold)
	}
	if opts.Credit < 0 || opts.Credit > provider.MaxCredit {
		return fmt.Errorf("PROVIDER_CREDIT (-credit): %d is not from 0 to %d", opts.Credit, provider.MaxCredit)
	}
	logger := newLogger(*format, stderr).With("service", "review-desk")
	db, err := postgres.Open(ctx, *dbURL, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	// Each call is one short statement or transaction: 8 connections keep
	// a laptop's cores busy, where 32 busy backends spend them contending.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	if err := provider.Migrate(db); err != nil {
		return err
	}
	ln, err := service.Listen(*addr, "PROVIDER_LISTEN_ADDR")
	if err != nil {
		return err
	}
	desk, err := provider.NewServer(db, logger, opts)
	if err != nil {
		ln.Close()
		return err
	}
	// The sweep of expired holds stops with the server, before the
	// database closes.
	sweepCtx, stopSweep := context.WithCancel(ctx)
	var sweep sync.WaitGroup
	sweep.Go(func() { desk.SweepHolds(sweepCtx) })
	defer sweep.Wait()
	defer stopSweep()
	srv := serving.NewServer(desk.Handler(), logger, readTimeout) // the API's timeouts
	logger.Info("serving", "addr", ln.Addr().String(), "faults", opts.Faults, "slot_hold", opts.SlotHold, "credit", opts.Credit)
	fmt.Fprintf(stdout, "review desk listening on http://%s\n", ln.Addr())
	return serving.Serve(ctx, logger, srv, ln, 10*time.Second)
}
