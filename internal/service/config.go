package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tracing"
)

// Config is the configuration of every command (NewSettings).
type Config struct {
	cmd              string // the command it configures
	databaseURL      string
	ListenAddr       string
	TTL              time.Duration
	Lease            time.Duration
	sweepInterval    time.Duration
	sweepBatch       int
	tokens           string
	Workshop         bool
	refusedTopics    string
	logFormat        string
	shutdownTimeout  time.Duration
	readTimeout      time.Duration // of an HTTP request, headers and body
	path             string        // "" (each operation's own), one_phase or two_phase
	unprepared       bool
	newKeysPerSecond float64 // the bound on new keys per actor, in this process
	newKeysBurst     int
	ProviderURL      string
	dispatch         bool // serve runs the dispatcher too
	dispatchAttempts int
	dispatchRetry    time.Duration
	dispatchTimeout  time.Duration
	metricsAddr      string         // dispatch serves /metrics here; empty: not at all
	tracing          tracing.Config // the standard OTEL_* variables: no flags, as every OpenTelemetry SDK reads them
}

// commandUsage is the first line of each command's -h.
var commandUsage = map[string]string{
	"serve":         "usage: demo-api serve [flags]",
	"migrate":       "usage: demo-api migrate up|down [flags]",
	"purge-expired": "usage: demo-api purge-expired [flags]",
	"dispatch":      "usage: demo-api dispatch [flags]\n\nHands the outbox's events to the other system (PROVIDER_URL) until stopped (serve does it too, unless DISPATCH=false).",
}

// Settings declares the settings of a command: each a flag, set by the
// environment variable its help names unless the flag is given. A main
// declares its own beside the template's before it parses them.
type Settings struct {
	fs   *flag.FlagSet
	envs []env
	c    *Config
}

// env is a flag's variable, what its value must be, and a check (nil: none).
type env struct {
	name, flag, want string
	ok               func() bool
}

func declare[T any](s *Settings, define func(*T, string, T, string), p *T, name, flagName string, def T, help, want string, ok func() bool) {
	define(p, flagName, def, help+" ($"+name+")")
	s.envs = append(s.envs, env{name, flagName, want, ok})
}

// String declares a setting of text.
func (s *Settings) String(p *string, name, flagName, def, help string) {
	declare(s, s.fs.StringVar, p, name, flagName, def, help, "", nil)
}

// Duration declares a setting of a duration, such as 30s.
func (s *Settings) Duration(p *time.Duration, name, flagName, def, help string) {
	d, _ := time.ParseDuration(def)
	declare(s, s.fs.DurationVar, p, name, flagName, d, help, "a duration (e.g. 30s, 5m, 24h)", nil)
}

// Bool declares a setting of true or false.
func (s *Settings) Bool(p *bool, name, flagName string, def bool, help string) {
	declare(s, s.fs.BoolVar, p, name, flagName, def, help, "a boolean (use true or false)", nil)
}

// Positive declares a setting of a whole number of at least 1.
func (s *Settings) Positive(p *int, name, flagName string, def int, help string) {
	declare(s, s.fs.IntVar, p, name, flagName, def, help, "a positive number", func() bool { return *p >= 1 })
}

// Rate declares a setting of a positive number, such as 2.5.
func (s *Settings) Rate(p *float64, name, flagName string, def float64, help string) {
	declare(s, s.fs.Float64Var, p, name, flagName, def, help, "a positive number", func() bool { return positiveRate(*p) })
}

func positiveRate(f float64) bool { return f > 0 && !math.IsInf(f, 0) }

// fromEnv sets each flag that args did not give from its variable.
func (s *Settings) fromEnv(getenv func(string) string) error {
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, e := range s.envs {
		v := getenv(e.name)
		if v == "" || given[e.flag] {
			continue
		}
		if err := s.fs.Set(e.flag, v); err != nil || (e.ok != nil && !e.ok()) {
			return fmt.Errorf("%s: %q is not %s", e.name, v, e.want)
		}
	}
	return nil
}

// NewSettings declares the template's settings of cmd (serve, dispatch,
// migrate or purge-expired) into c.
func NewSettings(cmd string, c *Config) *Settings {
	*c = Config{cmd: cmd}
	fs := flag.NewFlagSet("demo-api "+cmd, flag.ContinueOnError)
	set := &Settings{fs: fs, c: c}
	str, dur, boolean, positive, rate := set.String, set.Duration, set.Bool, set.Positive, set.Rate
	str(&c.databaseURL, "DATABASE_URL", "database-url", "", "PostgreSQL URL")
	str(&c.ListenAddr, "LISTEN_ADDR", "listen", ":8080", "listen address")
	dur(&c.TTL, "IDEMPOTENCY_TTL", "ttl", "24h", "how long a completed key is replayed")
	dur(&c.Lease, "IDEMPOTENCY_LEASE", "lease", "30s", "how long a claim is owned before a retry may take it over")
	dur(&c.sweepInterval, "SWEEP_INTERVAL", "sweep-interval", "1m", "how often the sweeper deletes expired keys")
	dur(&c.readTimeout, "HTTP_READ_TIMEOUT", "read-timeout", "30s", "how long a request may take to arrive, headers and body")
	dur(&c.shutdownTimeout, "SHUTDOWN_TIMEOUT", "shutdown-timeout", "25s", "how long in-flight requests get to finish on SIGTERM")
	positive(&c.sweepBatch, "SWEEP_BATCH", "sweep-batch", 500, "rows the sweeper deletes per statement")
	rate(&c.newKeysPerSecond, "NEW_KEYS_PER_SECOND", "new-keys-per-second", 10, "new idempotency keys each actor may store per second, in this process; over it: 429 rate_limited")
	positive(&c.newKeysBurst, "NEW_KEYS_BURST", "new-keys-burst", 50, "new idempotency keys each actor may store at once before NEW_KEYS_PER_SECOND applies")
	str(&c.tokens, "API_TOKENS", "tokens", "", "bearer tokens as actor:sha256hex,… (see hash-token)")
	boolean(&c.Workshop, "WORKSHOP", "workshop", false, "accept the Workshop-* headers")
	str(&c.refusedTopics, "REFUSED_TOPICS", "refused-topics", "blocked", "comma-separated topics the review desk refuses")
	str(&c.logFormat, "LOG_FORMAT", "log-format", "json", "json or text")
	str(&c.path, "IDEMPOTENCY_PATH", "path", "", "make every operation take this path: one_phase or two_phase; empty: each its own")
	boolean(&c.unprepared, "DATABASE_UNPREPARED", "unprepared", false, "DATABASE_URL reaches a pooler in transaction mode not recognised by itself (PgBouncer is): prepare nothing, migrate nothing through it")
	str(&c.ProviderURL, "PROVIDER_URL", "provider-url", "", "the review desk's URL, e.g. http://127.0.0.1:8090; empty: serve dispatches nothing")
	boolean(&c.dispatch, "DISPATCH", "dispatch", true, "serve runs the dispatcher when PROVIDER_URL is set")
	positive(&c.dispatchAttempts, "DISPATCH_MAX_ATTEMPTS", "dispatch-max-attempts", 8, "attempts before an unclear delivery is unknown")
	dur(&c.dispatchRetry, "DISPATCH_FIRST_RETRY", "dispatch-first-retry", "1s", "the wait after a first failed delivery; it doubles, jittered, up to 1m")
	dur(&c.dispatchTimeout, "DISPATCH_CALL_TIMEOUT", "dispatch-call-timeout", "5s", "how long one call to the review desk may take; a taken row's lease is three")
	if cmd == "dispatch" {
		str(&c.metricsAddr, "METRICS_ADDR", "metrics-listen", "", "serve /metrics on this address, e.g. 127.0.0.1:9091; empty: no metrics")
	}
	return set
}

// Parse reads the settings from args, then from the environment for each
// flag args did not give, and checks them; -h prints them to stdout and
// returns flag.ErrHelp.
func (s *Settings) Parse(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, cmd, fs := s.c, s.c.cmd, s.fs
	usage := commandUsage[cmd] + "\n\nEach flag has an environment variable, named in its help; a flag wins.\n"
	if err := parseFlags(fs, args, usage, stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, usage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (%s)", fs.Arg(0), commandUsage[cmd])
	}
	if err := s.fromEnv(getenv); err != nil {
		return err
	}
	for _, bad := range []struct {
		is  bool
		err string
	}{
		{c.databaseURL == "", "set DATABASE_URL (or -database-url) to a PostgreSQL URL"},
		{(cmd == "serve" || cmd == "dispatch") && (c.Lease <= 0 || c.TTL < c.Lease), "IDEMPOTENCY_LEASE must be positive and at most IDEMPOTENCY_TTL: " +
			"a retry told to wait out a claim (Retry-After, at most the lease) must still find its answer"},
		{cmd == "dispatch" && c.ProviderURL == "", "set PROVIDER_URL (or -provider-url) to the review desk's URL"},
		{cmd == "serve" && !positiveRate(c.newKeysPerSecond),
			"NEW_KEYS_PER_SECOND must be a positive number: the bound on new keys per actor is always on (raise it to loosen it)"},
		{cmd == "serve" && c.newKeysBurst < 1, "NEW_KEYS_BURST must be at least 1: an actor must be able to store one new key"},
		{c.path != "" && c.path != string(idempotency.OnePhase) && c.path != string(idempotency.TwoPhase), "IDEMPOTENCY_PATH must be one_phase, two_phase or empty"},
		{c.logFormat != "json" && c.logFormat != "text", "LOG_FORMAT must be json or text"},
	} {
		if bad.is {
			return errors.New(bad.err)
		}
	}
	if _, err := auth.Parse(c.tokens); cmd == "serve" && err != nil && strings.TrimSpace(c.tokens) != "" {
		return fmt.Errorf("API_TOKENS: %w", err)
	}
	c.tracing = tracing.FromEnv(getenv)
	return nil
}

// Tokens are the bearer tokens of API_TOKENS; none is an error, since every
// request would be refused.
func (c Config) Tokens() (auth.Tokens, error) {
	if strings.TrimSpace(c.tokens) == "" {
		return nil, fmt.Errorf("API_TOKENS: no tokens configured, so every request would be refused (401): " +
			"set actor:sha256hex,… (demo-api hash-token TOKEN prints the hash)")
	}
	tokens, err := auth.Parse(c.tokens)
	if err != nil {
		return nil, fmt.Errorf("API_TOKENS: %w", err)
	}
	return tokens, nil
}

// newLogger is a log to w in format, json or text.
func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

// Refused are the topics the review desk refuses (REFUSED_TOPICS).
func (c Config) Refused() map[string]bool {
	m := map[string]bool{}
	for t := range strings.SplitSeq(c.refusedTopics, ",") {
		if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
			m[t] = true
		}
	}
	return m
}
