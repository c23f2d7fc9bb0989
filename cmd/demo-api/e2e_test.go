package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/browsertest" // demo-only
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// binary is the demo-api built once for the tests that cross the process
// boundary: crashes and signals need a real process.
var binary string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

// testMain builds the binary into a scratch folder, runs the tests, and
// removes the folder and the browser's files on every way out: a failed
// build, failed tests, or an interrupt (Ctrl-C) in the middle of them.
func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "demo-api-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var once sync.Once
	var left error // what could not be removed
	cleanUp := func() error {
		once.Do(func() {
			var browser error
			browser = browsertest.Close() // demo-only
			left = errors.Join(browser, os.RemoveAll(dir))
		})
		return left
	}
	defer cleanUp()
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(interrupted)
	go func() {
		if sig, ok := <-interrupted; ok {
			fmt.Fprintf(os.Stderr, "demo-api tests: %v: removing the scratch folder and the browser\n", sig)
			cleanUp()
			os.Exit(1)
		}
	}()
	binary = filepath.Join(dir, "demo-api")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build demo-api: %v\n%s", err, out)
		return 1
	}
	code := pgtest.Run(m)
	if err := cleanUp(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}

const e2eToken = "tok-e2e-5d2c"

// proc is a running demo-api process: serve, or dispatch.
type proc struct {
	cmd     *exec.Cmd
	url     string // serve's base URL
	logPath string // the process's stderr
	exited  chan error
}

// start runs demo-api serve on databaseURL with extra environment.
func start(t *testing.T, databaseURL string, env ...string) *proc {
	t.Helper()
	p, stdout := launch(t, "serve", databaseURL, env...)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("demo-api serve printed no address: %v\n%s", err, p.log())
	}
	p.url = strings.TrimSpace(strings.TrimPrefix(line, "demo-api listening on "))
	go io.Copy(io.Discard, stdout)
	return p
}

// startDispatch runs demo-api dispatch on databaseURL with extra
// environment, and returns once it logged that it runs.
func startDispatch(t *testing.T, databaseURL string, env ...string) *proc {
	t.Helper()
	p, stdout := launch(t, "dispatch", databaseURL, env...)
	go io.Copy(io.Discard, stdout)
	if !testkit.Eventually(10*time.Second, func() bool { return strings.Contains(p.log(), `"msg":"dispatching"`) }) {
		t.Fatalf("demo-api dispatch did not start:\n%s", p.log())
	}
	return p
}

// launch starts demo-api command on databaseURL, its stderr in a file of
// the test's, and kills it when the test ends.
func launch(t *testing.T, command, databaseURL string, env ...string) (*proc, io.Reader) {
	t.Helper()
	cmd := exec.Command(binary, command)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + databaseURL,
		"LISTEN_ADDR=127.0.0.1:0",
		"API_TOKENS=alice:" + auth.Hash(e2eToken),
		"WORKSHOP=true",
	}, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logPath: filepath.Join(t.TempDir(), command+".log"), exited: make(chan error, 1)}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", command, p.log())
		}
		checkNoSecrets(t, p.log())
	})
	return p, stdout
}

// kill ends the process with SIGKILL, as a crash would: nothing of it
// runs after, and kill returns once it is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill demo-api: %v", err)
	}
	<-p.exited
}

// post sends a create as alice.
func (p *proc) post(key string, header ...string) (*http.Response, string, error) {
	resp, body, err := testkit.PostCreate(context.Background(), p.url, e2eToken, key, `{"topic":"topic-e2e","note":"note-e2e"}`, header...)
	return resp, string(body), err
}

// do sends method path as alice with key (none if empty) and extra headers
// given as name, value pairs, and reads the answer.
func (p *proc) do(method, path, key string, header ...string) (*http.Response, []byte, error) {
	return testkit.Send(context.Background(), method, p.url+path, e2eToken, key, "", header...)
}

// waitInProgress polls the outcome route until key is claimed.
func (p *proc) waitInProgress(t *testing.T, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r, _ := http.NewRequest(http.MethodGet, p.url+"/v1/idempotency-keys/"+key, nil)
		r.Header.Set("Authorization", "Bearer "+e2eToken)
		if resp, err := http.DefaultClient.Do(r); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"state":"in_progress"`) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("key %s never showed in progress", key)
}

func countRows(t *testing.T, url string) int {
	t.Helper()
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return testkit.Count(t, db, `SELECT count(*) FROM demo_requests`)
}

// TestCrashMidRequest kills the server (SIGKILL) after the claim committed and
// before the finish. The restarted server answers 409 while the dead claim's
// lease lives, then takes it over and creates the request exactly once.
// The lease is short, but its half, the work's budget, still covers what a
// statement may take by the contract (2 s and the wire's half second).
func TestCrashMidRequest(t *testing.T) {
	testkit.Long(t, "kills the server process")
	url := pgtest.NewURL(t)
	const lease = 5 * time.Second
	p := start(t, url, "IDEMPOTENCY_LEASE="+lease.String())
	errc := make(chan error, 1)
	go func() {
		_, _, err := p.post("key-crash", "Workshop-Delay", "1400ms")
		errc <- err
	}()
	p.waitInProgress(t, "key-crash")
	killedAt := time.Now()
	p.kill(t)
	if err := <-errc; err == nil {
		t.Fatal("the client got an answer from a killed server")
	}
	if n := countRows(t, url); n != 0 {
		t.Fatalf("%d business rows after the crash, want 0", n)
	}

	p2 := start(t, url, "IDEMPOTENCY_LEASE="+lease.String())
	resp, body, err := p2.post("key-crash")
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
		if resp, body, err = p2.post("key-crash"); err != nil {
			t.Fatal(err)
		}
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after the lease: %d %s, want a fresh 201", resp.StatusCode, body)
	}
	if !testkit.Eventually(2*time.Second, func() bool { return strings.Contains(p2.log(), `"outcome":"lease_taken_over"`) }) {
		t.Fatal("the restarted server did not log a lease takeover")
	}
	if n := countRows(t, url); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// TestGracefulShutdown sends SIGTERM while a request is inside its work: the
// server stops accepting, lets the request finish, and exits 0.
func TestGracefulShutdown(t *testing.T) {
	testkit.Long(t, "signals the server process")
	url := pgtest.NewURL(t)
	p := start(t, url)
	type answer struct {
		status int
		body   string
		err    error
	}
	inflight := make(chan answer, 1)
	go func() {
		resp, body, err := p.post("key-term", "Workshop-Delay", "1500ms")
		if err != nil {
			inflight <- answer{err: err}
			return
		}
		inflight <- answer{status: resp.StatusCode, body: body}
	}()
	p.waitInProgress(t, "key-term")
	p.cmd.Process.Signal(syscall.SIGTERM)

	a := <-inflight
	if a.err != nil || a.status != http.StatusCreated {
		t.Fatalf("in-flight request across SIGTERM: %d %s %v, want 201", a.status, a.body, a.err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("demo-api exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("demo-api did not exit after SIGTERM")
	}
	if n := countRows(t, url); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	// At start it said whether a commit waits for a synchronous standby:
	// not on a single server.
	for _, msg := range []string{`"msg":"replication: asynchronous`, `"synchronous_standbys_attached":0`,
		`"msg":"shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(p.log(), msg) {
			t.Fatalf("log lacks %s", msg)
		}
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

func checkNoSecrets(t *testing.T, logs string) {
	secrets := []string{e2eToken, "key-crash", "key-term", "topic-e2e", "note-e2e"}
	secrets = append(secrets, expediteKey) // demo-only
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the server logged %q", s)
		}
	}
}

// log is what the server has written to stderr so far.
func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}
