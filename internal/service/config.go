package service

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/serving"
	"github.com/demo-api/demo-api/internal/tracing"
)

// Config is the configuration of every command. Each field has an
// environment variable and a flag; a flag wins.
type Config struct {
	databaseURL   string
	listenAddr    string
	TTL           time.Duration
	Lease         time.Duration
	sweepInterval time.Duration
	sweepBatch    int
	tokens        string
	Workshop      bool
	// Extension.Authenticate's check of the tokens API_TOKENS does not hold.
	authenticate     func(token string) (string, error)
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
	pprofAddr        string         // serve's profiler (net/http/pprof), loopback only; empty: none
	tracing          tracing.Config // the standard OTEL_* variables: no flags, as every OpenTelemetry SDK reads them
}

// commandUsage is the first line of each command's -h.
var commandUsage = map[string]string{
	"serve":         "usage: demo-api serve [flags]",
	"migrate":       "usage: demo-api migrate up|down [flags]",
	"purge-expired": "usage: demo-api purge-expired [flags]",
	"dispatch":      "usage: demo-api dispatch [flags]\n\nHands accepted demo requests to the review desk until stopped (serve does it too, unless DISPATCH=false).",
}

// Settings declares the settings of a command: each has an environment
// variable and a flag of the same meaning, and a flag wins. A value of an
// environment variable that does not parse is an error naming the
// variable, unless its flag is given too. A service built on this one
// declares its own with it (Extension.Settings).
type Settings struct {
	fs      *flag.FlagSet
	getenv  func(string) string
	envErrs []envErr // the environment variables that did not parse
}

type envErr struct {
	flag string
	err  error
}

// env is the value of the environment variable name, or def.
func (s *Settings) env(name, def string) string {
	if v := s.getenv(name); v != "" {
		return v
	}
	return def
}

// String declares a setting of text.
func (s *Settings) String(p *string, name, flagName, def, help string) {
	s.fs.StringVar(p, flagName, s.env(name, def), help+" ($"+name+")")
}

// Duration declares a setting of a duration, such as 30s.
func (s *Settings) Duration(p *time.Duration, name, flagName, def, help string) {
	d, err := time.ParseDuration(s.env(name, def))
	if err != nil {
		s.envErrs = append(s.envErrs, envErr{flagName, fmt.Errorf("%s: %q is not a duration (e.g. 30s, 5m, 24h)", name, s.getenv(name))})
		d, _ = time.ParseDuration(def)
	}
	s.fs.DurationVar(p, flagName, d, help+" ($"+name+")")
}

// Bool declares a setting of true or false.
func (s *Settings) Bool(p *bool, name, flagName string, def bool, help string) {
	b := def
	if v := s.getenv(name); v != "" {
		var err error
		if b, err = strconv.ParseBool(v); err != nil {
			s.envErrs = append(s.envErrs, envErr{flagName, fmt.Errorf("%s: %q is not a boolean (use true or false)", name, v)})
			b = def
		}
	}
	s.fs.BoolVar(p, flagName, b, help+" ($"+name+")")
}

// Positive declares a setting of a whole number of at least 1.
func (s *Settings) Positive(p *int, name, flagName string, def int, help string) {
	n, err := strconv.Atoi(s.env(name, strconv.Itoa(def)))
	if err != nil || n < 1 {
		s.envErrs = append(s.envErrs, envErr{flagName, fmt.Errorf("%s: %q is not a positive number", name, s.getenv(name))})
		n = def
	}
	s.fs.IntVar(p, flagName, n, help+" ($"+name+")")
}

// Rate declares a setting of a positive number, such as 2.5.
func (s *Settings) Rate(p *float64, name, flagName string, def float64, help string) {
	f, err := strconv.ParseFloat(s.env(name, strconv.FormatFloat(def, 'g', -1, 64)), 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		s.envErrs = append(s.envErrs, envErr{flagName, fmt.Errorf("%s: %q is not a positive number", name, s.getenv(name))})
		f = def
	}
	s.fs.Float64Var(p, flagName, f, help+" ($"+name+")")
}

// loadConfig reads the environment (through getenv), then the flags in args,
// into the settings of cmd, and those ext declares. With -h it prints the
// flags to stdout and returns flag.ErrHelp; a bad flag prints them to
// stderr.
func loadConfig(cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer, ext *Extension) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("demo-api "+cmd, flag.ContinueOnError)
	// The usage goes to stdout for -h, to stderr after a bad flag; the flag
	// package's own error line is left out (run's caller prints the error).
	var usage bytes.Buffer
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(&usage, "%s\n\nEach flag has an environment variable, named in its help; a flag wins.\n\n", commandUsage[cmd])
		fs.SetOutput(&usage)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	set := &Settings{fs: fs, getenv: getenv}
	str, dur, boolean, positive, rate := set.String, set.Duration, set.Bool, set.Positive, set.Rate
	str(&c.databaseURL, "DATABASE_URL", "database-url", "", "PostgreSQL URL")
	str(&c.listenAddr, "LISTEN_ADDR", "listen", ":8080", "listen address")
	dur(&c.TTL, "IDEMPOTENCY_TTL", "ttl", "24h", "how long a completed key is replayed")
	dur(&c.Lease, "IDEMPOTENCY_LEASE", "lease", "30s", "how long a claim is owned before a retry may take it over")
	dur(&c.sweepInterval, "SWEEP_INTERVAL", "sweep-interval", "1m", "how often the sweeper deletes expired keys")
	dur(&c.readTimeout, "HTTP_READ_TIMEOUT", "read-timeout", "30s", "how long a request may take to arrive, headers and body")
	dur(&c.shutdownTimeout, "SHUTDOWN_TIMEOUT", "shutdown-timeout", "25s", "how long in-flight requests get to finish on SIGTERM")
	positive(&c.sweepBatch, "SWEEP_BATCH", "sweep-batch", 500, "rows the sweeper deletes per statement")
	rate(&c.newKeysPerSecond, "NEW_KEYS_PER_SECOND", "new-keys-per-second", 10, "new idempotency keys each actor may store per second, in this process; over it: 429 rate_limited")
	positive(&c.newKeysBurst, "NEW_KEYS_BURST", "new-keys-burst", 50, "new idempotency keys each actor may store at once before NEW_KEYS_PER_SECOND applies")
	fs.StringVar(&c.tokens, "tokens", set.env("API_TOKENS", ""), "bearer tokens as actor:sha256hex,… ($API_TOKENS; see hash-token)")
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
	if ext != nil && ext.Settings != nil && (cmd == "serve" || cmd == "dispatch") {
		ext.Settings(set)
	}
	if cmd == "serve" {
		str(&c.pprofAddr, "PPROF_ADDR", "pprof-listen", "", "serve net/http/pprof on this address of this machine only, e.g. 127.0.0.1:6060; empty: no profiler")
	}
	if cmd == "dispatch" {
		str(&c.metricsAddr, "METRICS_ADDR", "metrics-listen", "", "serve /metrics on this address, e.g. 127.0.0.1:9091; empty: no metrics")
	}
	// -h must not print a password or the token hashes found in the environment.
	fs.Lookup("database-url").DefValue = ""
	fs.Lookup("tokens").DefValue = ""

	if err := fs.Parse(args); err != nil {
		w := stderr
		if errors.Is(err, flag.ErrHelp) {
			w = stdout
		}
		io.Copy(w, &usage)
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (%s)", fs.Arg(0), commandUsage[cmd])
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, e := range set.envErrs {
		if !given[e.flag] {
			return c, e.err
		}
	}
	if c.databaseURL == "" {
		return c, fmt.Errorf("set DATABASE_URL (or -database-url) to a PostgreSQL URL")
	}
	if cmd == "serve" {
		tokens, err := auth.Parse(c.tokens)
		none := err != nil && strings.TrimSpace(c.tokens) == ""
		if err != nil && !none {
			return c, fmt.Errorf("API_TOKENS: %w", err)
		}
		if ext != nil && ext.Authenticate != nil {
			if c.authenticate, err = ext.Authenticate(c, tokens); err != nil {
				return c, err
			}
		}
		if none && c.authenticate == nil {
			return c, fmt.Errorf("API_TOKENS: no tokens configured, so every request would be refused (401): " +
				"set actor:sha256hex,… (demo-api hash-token TOKEN prints the hash)")
		}
	}
	if (cmd == "serve" || cmd == "dispatch") && (c.Lease <= 0 || c.TTL < c.Lease) {
		return c, fmt.Errorf("IDEMPOTENCY_LEASE must be positive and at most IDEMPOTENCY_TTL: a retry told to wait out a claim (Retry-After, at most the lease) must still find its answer")
	}
	if cmd == "dispatch" && c.ProviderURL == "" {
		return c, fmt.Errorf("set PROVIDER_URL (or -provider-url) to the review desk's URL")
	}
	if cmd == "serve" && (!(c.newKeysPerSecond > 0) || math.IsInf(c.newKeysPerSecond, 0)) {
		return c, fmt.Errorf("NEW_KEYS_PER_SECOND must be a positive number: the bound on new keys per actor is always on (raise it to loosen it)")
	}
	if cmd == "serve" && c.newKeysBurst < 1 {
		return c, fmt.Errorf("NEW_KEYS_BURST must be at least 1: an actor must be able to store one new key")
	}
	if c.path != "" && c.path != string(idempotency.OnePhase) && c.path != string(idempotency.TwoPhase) {
		return c, fmt.Errorf("IDEMPOTENCY_PATH must be one_phase, two_phase or empty")
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		return c, fmt.Errorf("LOG_FORMAT must be json or text")
	}
	c.tracing = tracing.FromEnv(getenv)
	return c, nil
}

// Logger is the log of a command, in LOG_FORMAT.
func (c Config) Logger(w io.Writer) *slog.Logger { return NewLogger(c.logFormat, w) }

// NewLogger is a log to w in format, json or text.
func NewLogger(format string, w io.Writer) *slog.Logger {
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

// HTTPServer is an HTTP server of h with the timeouts every server of the
// project has (the API, the review desk, the dispatcher's metrics), reading
// a request for at most c.readTimeout.
func (c Config) HTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return serving.NewServer(h, logger, c.readTimeout)
}
