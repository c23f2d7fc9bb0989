package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// testenv.Binary is this program, built once for the tests that run it as
// a process of its own.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m, ".", pgtest.Run)) }

// TestHelp: every command's -h prints its usage to stdout and is no error,
// without the database URL or token hashes of the environment.
func TestHelp(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u:secret-pw@db/x", "API_TOKENS": "alice:" + auth.Hash("t")}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "-h"}, "usage: demo-api serve [flags]"},
		{[]string{"serve", "--help"}, "-workshop"},
		{[]string{"migrate", "-h"}, "usage: demo-api migrate up|down [flags]"},
		{[]string{"migrate", "up", "-h"}, "-database-url"},
		{[]string{"purge-expired", "-h"}, "-sweep-batch"},
		{[]string{"hash-token", "-h"}, "usage: demo-api hash-token TOKEN"},
		{[]string{"dispatch", "-h"}, "-provider-url"},
		{[]string{"send", "-h"}, "-resolve"},
		{[]string{"healthcheck", "-h"}, "usage: demo-api healthcheck"},
		{[]string{"-h"}, "commands:"},
	} {
		var stdout, stderr strings.Builder
		err := run(context.Background(), tc.args, getenv, &stdout, &stderr)
		if err != nil {
			t.Errorf("demo-api %v: %v", tc.args, err)
		}
		if !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("demo-api %v printed %q, want %q in it", tc.args, stdout.String(), tc.want)
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, "secret-pw") || strings.Contains(out, auth.Hash("t")) {
			t.Errorf("demo-api %v printed a secret of the environment:\n%s", tc.args, out)
		}
	}
	// A bad flag is an error, with the usage on stderr.
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"serve", "-nope"}, getenv, &stdout, &stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "usage: demo-api serve") || stdout.Len() > 0 {
		t.Errorf("serve -nope: err %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
}

// TestCommands runs the chores through run().
func TestCommands(t *testing.T) {
	url := pgtest.NewURL(t)
	env := func(k string) string {
		return map[string]string{"DATABASE_URL": url}[k]
	}
	var out strings.Builder
	ctx := context.Background()
	for _, args := range [][]string{{"migrate", "down"}, {"migrate", "up"}, {"migrate", "up"}, {"purge-expired"}} {
		out.Reset()
		if err := run(ctx, args, env, &out, io.Discard); err != nil {
			t.Fatalf("demo-api %v: %v", args, err)
		}
	}
	if got := out.String(); got != "deleted 0 expired idempotency records\n" {
		t.Fatalf("purge-expired printed %q", got)
	}
	// Five expired records and one live claim; batches of two.
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`
INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until,
                              status_code, response_body, created_at, expires_at)
SELECT 'alice', 'demo-requests.create', 'old-' || i, 'fp', 'completed'::key_state, gen_random_uuid(), NULL,
       201, '{}'::bytea, now() - interval '2 days', now() - interval '1 day'
FROM generate_series(1, 5) i
UNION ALL
SELECT 'alice', 'demo-requests.create', 'live', 'fp', 'in_progress', gen_random_uuid(), now() + interval '1 minute',
       NULL, NULL::bytea, now(), now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	batchEnv := func(k string) string {
		return map[string]string{"DATABASE_URL": url, "SWEEP_BATCH": "2"}[k]
	}
	if err := run(ctx, []string{"purge-expired"}, batchEnv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "deleted 5 expired idempotency records\n" {
		t.Fatalf("purge-expired printed %q, want 5 deleted (the live claim kept)", got)
	}
	out.Reset()
	if err := run(ctx, []string{"hash-token", "dev-alice"}, env, &out, io.Discard); err != nil || strings.TrimSpace(out.String()) != auth.Hash("dev-alice") {
		t.Fatalf("hash-token: %q, %v", out.String(), err)
	}
	for _, args := range [][]string{nil, {"nope"}, {"migrate"}, {"serve"}} {
		if err := run(ctx, args, env, io.Discard, io.Discard); err == nil {
			t.Fatalf("demo-api %v succeeded", args) // serve: no API_TOKENS
		}
	}
}

// TestHealthcheck: the command succeeds on a 200 from /healthz and fails
// on another status or no answer; the testenv.Binary exits 1 then, which is what
// a container's HEALTHCHECK reads.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	// LISTEN_ADDR as serve would read it, on every interface.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	getenv := func(k string) string {
		if k == "LISTEN_ADDR" {
			return ":" + port
		}
		return ""
	}
	var stdout, stderr strings.Builder
	if err := run(context.Background(), []string{"healthcheck"}, getenv, &stdout, &stderr); err != nil {
		t.Errorf("healthcheck of a server answering 200: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := run(context.Background(), []string{"healthcheck"}, getenv, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("healthcheck of a server answering 503: %v, want an error naming the 503", err)
	}
	srv.Close()
	out, err := exec.Command(testenv.Binary, "healthcheck", "-listen", ln.Addr().String()).CombinedOutput()
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 1 {
		t.Errorf("demo-api healthcheck with nothing listening: %v, want exit status 1\n%s", err, out)
	}
}
