package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// config is the configuration of every command. Each field has an
// environment variable and a flag; a flag wins.
type config struct {
	databaseURL     string
	listenAddr      string
	ttl             time.Duration
	lease           time.Duration
	sweepInterval   time.Duration
	sweepBatch      int
	tokens          string
	workshop        bool
	refusedTopics   string
	logFormat       string
	shutdownTimeout time.Duration
	path            string // "" (each operation's own), one_phase or two_phase
	unprepared      bool
}

func loadConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("demo-api "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var errs []error
	dur := func(p *time.Duration, name, flagName, def, help string) {
		d, err := time.ParseDuration(env(name, def))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		fs.DurationVar(p, flagName, d, help+" ($"+name+")")
	}
	fs.StringVar(&c.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	fs.StringVar(&c.listenAddr, "listen", env("LISTEN_ADDR", ":8080"), "listen address ($LISTEN_ADDR)")
	dur(&c.ttl, "IDEMPOTENCY_TTL", "ttl", "24h", "how long a completed key is replayed")
	dur(&c.lease, "IDEMPOTENCY_LEASE", "lease", "30s", "how long a claim is owned before a retry may take it over")
	dur(&c.sweepInterval, "SWEEP_INTERVAL", "sweep-interval", "1m", "how often the sweeper deletes expired keys")
	dur(&c.shutdownTimeout, "SHUTDOWN_TIMEOUT", "shutdown-timeout", "25s", "how long in-flight requests get to finish on SIGTERM")
	batch, err := strconv.Atoi(env("SWEEP_BATCH", "500"))
	if err != nil || batch < 1 {
		errs = append(errs, fmt.Errorf("SWEEP_BATCH must be a positive number"))
	}
	fs.IntVar(&c.sweepBatch, "sweep-batch", batch, "rows the sweeper deletes per statement ($SWEEP_BATCH)")
	fs.StringVar(&c.tokens, "tokens", env("API_TOKENS", ""), "bearer tokens as actor:sha256hex,… ($API_TOKENS; see hash-token)")
	fs.BoolVar(&c.workshop, "workshop", env("WORKSHOP", "false") == "true", "accept the Workshop-* headers ($WORKSHOP)")
	fs.StringVar(&c.refusedTopics, "refused-topics", env("REFUSED_TOPICS", "blocked"), "comma-separated topics the review desk refuses ($REFUSED_TOPICS)")
	fs.StringVar(&c.logFormat, "log-format", env("LOG_FORMAT", "json"), "json or text ($LOG_FORMAT)")
	fs.StringVar(&c.path, "path", env("IDEMPOTENCY_PATH", ""), "make every operation take this path: one_phase or two_phase; empty: each its own ($IDEMPOTENCY_PATH)")
	fs.BoolVar(&c.unprepared, "unprepared", env("DATABASE_UNPREPARED", "false") == "true", "do not prepare statements, for a pooler in transaction mode ($DATABASE_UNPREPARED)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if len(errs) > 0 {
		return c, errs[0]
	}
	if c.databaseURL == "" {
		return c, fmt.Errorf("set DATABASE_URL (or -database-url) to a PostgreSQL URL")
	}
	if cmd == "serve" {
		if _, err := auth.Parse(c.tokens); err != nil {
			return c, fmt.Errorf("API_TOKENS: %w", err)
		}
		if c.lease <= 0 || c.ttl < c.lease {
			return c, fmt.Errorf("IDEMPOTENCY_LEASE must be positive and at most IDEMPOTENCY_TTL")
		}
	}
	if c.path != "" && c.path != string(idempotency.OnePhase) && c.path != string(idempotency.TwoPhase) {
		return c, fmt.Errorf("IDEMPOTENCY_PATH must be one_phase, two_phase or empty")
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		return c, fmt.Errorf("LOG_FORMAT must be json or text")
	}
	return c, nil
}

func (c config) logger(w io.Writer) *slog.Logger {
	if c.logFormat == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

func (c config) refused() map[string]bool {
	m := map[string]bool{}
	for t := range strings.SplitSeq(c.refusedTopics, ",") {
		if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
			m[t] = true
		}
	}
	return m
}
