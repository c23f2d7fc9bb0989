package service

import (
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestLoadConfig reads the configuration from an environment and flags.
func TestLoadConfig(t *testing.T) {
	tokens := "alice:" + auth.Hash("t")
	base := map[string]string{"DATABASE_URL": "postgres://db/x", "API_TOKENS": tokens}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		cmd     string
		env     map[string]string
		args    []string
		check   func(Config) bool // for a valid configuration
		wantErr string            // for an invalid one: part of the error
	}{
		{name: "defaults", env: base, check: func(c Config) bool {
			return c.ListenAddr == ":8080" && c.TTL == 24*time.Hour && c.Lease == 30*time.Second &&
				c.sweepInterval == time.Minute && c.sweepBatch == 500 && !c.Workshop && c.logFormat == "json" &&
				c.shutdownTimeout == 25*time.Second && c.refusedTopics == "blocked"
		}},
		{name: "environment", env: with("LISTEN_ADDR", "127.0.0.1:9", "IDEMPOTENCY_TTL", "1h", "IDEMPOTENCY_LEASE", "10s",
			"SWEEP_BATCH", "7", "WORKSHOP", "true", "LOG_FORMAT", "text"), check: func(c Config) bool {
			return c.ListenAddr == "127.0.0.1:9" && c.TTL == time.Hour && c.Lease == 10*time.Second &&
				c.sweepBatch == 7 && c.Workshop && c.logFormat == "text"
		}},
		{name: "flags win over the environment", env: with("WORKSHOP", "true", "LISTEN_ADDR", ":1"),
			args: []string{"-workshop=false", "-listen", ":2"}, check: func(c Config) bool { return !c.Workshop && c.ListenAddr == ":2" }},
		{name: "WORKSHOP=1 is true", env: with("WORKSHOP", "1"), check: func(c Config) bool { return c.Workshop }},
		{name: "WORKSHOP=FALSE is false", env: with("WORKSHOP", "FALSE"), check: func(c Config) bool { return !c.Workshop }},
		{name: "WORKSHOP=yes is refused", env: with("WORKSHOP", "yes"), wantErr: `WORKSHOP: "yes" is not a boolean`},
		{name: "WORKSHOP=on is refused", env: with("WORKSHOP", "on"), wantErr: `WORKSHOP: "on" is not a boolean`},
		{name: "a bad WORKSHOP under its flag is ignored", env: with("WORKSHOP", "yes"), args: []string{"-workshop"},
			check: func(c Config) bool { return c.Workshop }},
		{name: "DATABASE_UNPREPARED=yes is refused", env: with("DATABASE_UNPREPARED", "yes"), wantErr: `DATABASE_UNPREPARED: "yes" is not a boolean`},
		{name: "DATABASE_UNPREPARED=true", env: with("DATABASE_UNPREPARED", "true"), check: func(c Config) bool { return c.unprepared }},
		{name: "bad duration", env: with("IDEMPOTENCY_TTL", "a day"), wantErr: `IDEMPOTENCY_TTL: "a day" is not a duration`},
		{name: "bad batch", env: with("SWEEP_BATCH", "0"), wantErr: "SWEEP_BATCH"},
		{name: "no database", env: map[string]string{"API_TOKENS": tokens}, wantErr: "set DATABASE_URL"},
		{name: "serve needs tokens", env: map[string]string{"DATABASE_URL": "postgres://db/x"},
			wantErr: "API_TOKENS: no tokens configured, so every request would be refused (401)"},
		{name: "purge-expired needs no tokens", cmd: "purge-expired", env: map[string]string{"DATABASE_URL": "postgres://db/x"},
			check: func(c Config) bool { return c.databaseURL == "postgres://db/x" }},
		{name: "dispatcher defaults", env: base, check: func(c Config) bool {
			return c.ProviderURL == "" && c.dispatch && c.dispatchAttempts == 8 && c.dispatchRetry == time.Second && c.dispatchTimeout == 5*time.Second
		}},
		{name: "dispatcher settings", env: with("PROVIDER_URL", "http://desk", "DISPATCH", "false", "DISPATCH_MAX_ATTEMPTS", "3",
			"DISPATCH_FIRST_RETRY", "200ms", "DISPATCH_CALL_TIMEOUT", "1s"), check: func(c Config) bool {
			return c.ProviderURL == "http://desk" && !c.dispatch && c.dispatchAttempts == 3 && c.dispatchRetry == 200*time.Millisecond &&
				c.dispatchTimeout == time.Second
		}},
		{name: "bad DISPATCH_MAX_ATTEMPTS", env: with("DISPATCH_MAX_ATTEMPTS", "0"), wantErr: "DISPATCH_MAX_ATTEMPTS"},
		{name: "dispatch needs a desk", cmd: "dispatch", env: base, wantErr: "set PROVIDER_URL"},
		{name: "dispatch needs no tokens", cmd: "dispatch", env: map[string]string{"DATABASE_URL": "postgres://db/x", "PROVIDER_URL": "http://desk"},
			check: func(c Config) bool { return c.ProviderURL == "http://desk" }},
		{name: "lease over ttl", env: with("IDEMPOTENCY_TTL", "1m", "IDEMPOTENCY_LEASE", "2m"), wantErr: "IDEMPOTENCY_LEASE"},
		{name: "the bound on new keys is on by default", env: base, check: func(c Config) bool {
			return c.newKeysPerSecond == 10 && c.newKeysBurst == 50
		}},
		{name: "the bound on new keys raised", env: with("NEW_KEYS_PER_SECOND", "2500.5", "NEW_KEYS_BURST", "10000"), check: func(c Config) bool {
			return c.newKeysPerSecond == 2500.5 && c.newKeysBurst == 10000
		}},
		{name: "NEW_KEYS_PER_SECOND=0 is refused", env: with("NEW_KEYS_PER_SECOND", "0"), wantErr: `NEW_KEYS_PER_SECOND: "0" is not a positive number`},
		{name: "NEW_KEYS_PER_SECOND=Inf is refused", env: with("NEW_KEYS_PER_SECOND", "Inf"), wantErr: "NEW_KEYS_PER_SECOND"},
		{name: "NEW_KEYS_PER_SECOND=fast is refused", env: with("NEW_KEYS_PER_SECOND", "fast"), wantErr: "NEW_KEYS_PER_SECOND"},
		{name: "NEW_KEYS_BURST=0 is refused", env: with("NEW_KEYS_BURST", "0"), wantErr: "NEW_KEYS_BURST"},
		{name: "a zero rate by flag is refused", env: base, args: []string{"-new-keys-per-second", "0"}, wantErr: "the bound on new keys per actor is always on"},
		{name: "a zero burst by flag is refused", env: base, args: []string{"-new-keys-burst", "0"}, wantErr: "NEW_KEYS_BURST must be at least 1"},
		{name: "log format", env: with("LOG_FORMAT", "xml"), wantErr: "LOG_FORMAT"},
		{name: "unknown flag", env: base, args: []string{"-nope"}, wantErr: "-nope"},
		{name: "stray argument", env: base, args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			if cmd == "" {
				cmd = "serve"
			}
			getenv := func(k string) string { return tc.env[k] }
			c, err := loadConfig(cmd, tc.args, getenv)
			if err == nil && cmd == "serve" {
				_, err = c.Tokens() // what serve reads before it opens anything
			}
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr == "" && !tc.check(c):
				t.Fatalf("config %+v", c)
			}
		})
	}
}

// TestHelpExitCode runs the testenv.Binary: -h exits 0, a bad WORKSHOP exits 1
// naming the variable.
func TestHelpExitCode(t *testing.T) {
	out, err := exec.Command(testenv.Binary, "serve", "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-listen") {
		t.Errorf("demo-api serve -h: %v\n%s", err, out)
	}
	cmd := exec.Command(testenv.Binary, "serve")
	cmd.Env = []string{"DATABASE_URL=postgres://db/x", "API_TOKENS=alice:" + auth.Hash("t"), "WORKSHOP=yes"}
	out, err = cmd.CombinedOutput()
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 1 || !strings.Contains(string(out), "WORKSHOP") {
		t.Errorf("demo-api serve with WORKSHOP=yes: %v\n%s", err, out)
	}
}

// TestLinksNoTestCode: the service testenv.Binary links no package that exists for
// tests or the bench.
func TestLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages", len(deps))
	}
	for _, p := range deps {
		if p == "testing" || strings.Contains(p, "/internal/tools/") || strings.Contains(p, "dockertest") || strings.Contains(p, "chromedp") ||
			strings.Contains(p, "demo-bench") || strings.Contains(p, "demo-chaos") || strings.HasSuffix(p, "/httptest") {
			t.Errorf("demo-api links %s", p)
		}
	}
}

// loadConfig is cmd's configuration as its main reads it.
func loadConfig(cmd string, args []string, getenv func(string) string) (Config, error) {
	var c Config
	err := NewSettings(cmd, &c).Parse(args, getenv, io.Discard, io.Discard)
	return c, err
}
