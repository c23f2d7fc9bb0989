package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// testenv.Binary is the demo-api built once for the tests that cross the process
// boundary: crashes and signals need a real process.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m, "../../cmd/demo-api", pgtest.Run)) }

// run is demo-api serve in this process (testenv.ServeInProcess), its parts
// composed as cmd/demo-api's serve composes them; args are "serve" and its
// flags.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg Config
	if err := NewSettings("serve", &cfg).Parse(args[1:], getenv, stdout, stderr); err != nil {
		return err
	}
	tokens, err := cfg.Tokens()
	if err != nil {
		return err
	}
	app, err := Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer app.Close()
	api, err := httpapi.NewServer(app.Deps(&demo.Service{Store: app.Store, RefusedTopics: cfg.Refused()}, tokens))
	if err != nil {
		return err
	}
	ln, err := Listen(cfg.ListenAddr, "LISTEN_ADDR")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "demo-api listening on http://%s\n", ln.Addr())
	return app.Serve(ctx, ln, api)
}

// TestCrashMidRequest kills the server (SIGKILL) after the claim committed and
// before the finish. The restarted server answers 409 while the dead claim's
// lease lives, then takes it over and creates the request exactly once.
// The lease is short, but its half, the work's budget, still covers what a
// statement may take by the contract (2 s and the wire's half second).
func TestCrashMidRequest(t *testing.T) {
	testenv.Long(t, "kills the server process")
	url := pgtest.NewURL(t)
	const lease = 5 * time.Second
	p := testenv.Start(t, url, "IDEMPOTENCY_LEASE="+lease.String())
	errc := make(chan error, 1)
	go func() {
		_, _, err := p.Post("key-crash", "Workshop-Delay", "1400ms")
		errc <- err
	}()
	p.WaitInProgress(t, "key-crash")
	killedAt := time.Now()
	p.Kill(t)
	if err := <-errc; err == nil {
		t.Fatal("the client got an answer from a killed server")
	}
	if n := rows(t, url); n != 0 {
		t.Fatalf("%d business rows after the crash, want 0", n)
	}

	p2 := testenv.Start(t, url, "IDEMPOTENCY_LEASE="+lease.String())
	resp, body, err := p2.Post("key-crash")
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(killedAt) < lease-500*time.Millisecond && resp.StatusCode != http.StatusConflict {
		t.Fatalf("retry within the dead claim's lease: %d %s, want 409", resp.StatusCode, body)
	}
	// The client retries 409 and 503 (a transient failure, stored nowhere).
	deadline := time.Now().Add(3 * lease)
	for (resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusServiceUnavailable) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if resp, body, err = p2.Post("key-crash"); err != nil {
			t.Fatal(err)
		}
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after the lease: %d %s, want a fresh 201", resp.StatusCode, body)
	}
	if !testenv.Eventually(2*time.Second, func() bool { return strings.Contains(p2.Log(), `"outcome":"lease_taken_over"`) }) {
		t.Fatal("the restarted server did not log a lease takeover")
	}
	if n := rows(t, url); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// TestGracefulShutdown sends SIGTERM while a request is inside its work: the
// server stops accepting, lets the request finish, and exits 0.
func TestGracefulShutdown(t *testing.T) {
	testenv.Long(t, "signals the server process")
	url := pgtest.NewURL(t)
	p := testenv.Start(t, url)
	type answer struct {
		status int
		body   string
		err    error
	}
	inflight := make(chan answer, 1)
	go func() {
		resp, body, err := p.Post("key-term", "Workshop-Delay", "1500ms")
		if err != nil {
			inflight <- answer{err: err}
			return
		}
		inflight <- answer{status: resp.StatusCode, body: body}
	}()
	p.WaitInProgress(t, "key-term")
	p.Cmd.Process.Signal(syscall.SIGTERM)

	a := <-inflight
	if a.err != nil || a.status != http.StatusCreated {
		t.Fatalf("in-flight request across SIGTERM: %d %s %v, want 201", a.status, a.body, a.err)
	}
	select {
	case err := <-p.Exited:
		if err != nil {
			t.Fatalf("demo-api exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("demo-api did not exit after SIGTERM")
	}
	if n := rows(t, url); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	// At start it said whether a commit waits for a synchronous standby:
	// not on a single server.
	for _, msg := range []string{`"msg":"replication: `, `"synchronous_standbys_attached":0`,
		`"msg":"shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(p.Log(), msg) {
			t.Fatalf("log lacks %s", msg)
		}
	}
}

// rows counts the demo requests of the database at url.
func rows(t *testing.T, url string) int {
	t.Helper()
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return testenv.Rows(t, db)
}
