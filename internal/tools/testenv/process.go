package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// Binary is the program Run built.
var Binary string

// Run builds the program of pkg (a folder) as Binary in a scratch folder,
// runs the tests with run, and removes the folder, on an interrupt too.
func Run(m *testing.M, pkg string, run func(*testing.M) int) int {
	dir, err := os.MkdirTemp("", "demo-api-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cleanUp := sync.OnceValue(func() error { return os.RemoveAll(dir) })
	defer cleanUp()
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(interrupted)
	go func() {
		fmt.Fprintf(os.Stderr, "demo-api tests: %v: removing the scratch folder\n", <-interrupted)
		cleanUp()
		os.Exit(1)
	}()
	Binary = filepath.Join(dir, "demo-api")
	if out, err := exec.Command("go", "build", "-o", Binary, pkg).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build demo-api: %v\n%s", err, out)
		return 1
	}
	code := run(m)
	if err := cleanUp(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}

// Proc is a running demo-api process: serve, or dispatch.
type Proc struct {
	Cmd    *exec.Cmd
	URL    string // serve's base URL
	stderr Buffer
	Exited chan error
}

// Start runs demo-api serve on databaseURL with extra environment.
func Start(t *testing.T, databaseURL string, env ...string) *Proc {
	t.Helper()
	p, stdout := Launch(t, "serve", databaseURL, env...)
	p.URL = listening(t, stdout, p.Log)
	return p
}

// listening reads the address serve prints first, then discards the rest.
func listening(t *testing.T, stdout io.Reader, log func() string) string {
	t.Helper()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("demo-api serve printed no address: %v\n%s", err, log())
	}
	go io.Copy(io.Discard, stdout)
	return strings.TrimSpace(strings.TrimPrefix(line, "demo-api listening on "))
}

// StartDispatch runs demo-api dispatch until it logs that it runs.
func StartDispatch(t *testing.T, databaseURL string, env ...string) *Proc {
	t.Helper()
	p, stdout := Launch(t, "dispatch", databaseURL, env...)
	go io.Copy(io.Discard, stdout)
	if !Eventually(10*time.Second, func() bool { return strings.Contains(p.Log(), `"msg":"dispatching"`) }) {
		t.Fatalf("demo-api dispatch did not start:\n%s", p.Log())
	}
	return p
}

// serveEnv is the environment of a test's service on databaseURL, then env.
func serveEnv(databaseURL string, env ...string) []string {
	return append([]string{"DATABASE_URL=" + databaseURL, "LISTEN_ADDR=127.0.0.1:0", "WORKSHOP=true",
		"API_TOKENS=alice:" + auth.Hash(TokenAlice)}, env...)
}

// Launch starts demo-api command and kills it when the test ends.
func Launch(t *testing.T, command, databaseURL string, env ...string) (*Proc, io.Reader) {
	t.Helper()
	cmd := exec.Command(Binary, command)
	cmd.Env = serveEnv(databaseURL, append(env, "PATH="+os.Getenv("PATH"))...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, Exited: make(chan error, 1)}
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", command, p.Log())
		}
		checkNoSecrets(t, p.Log(), "key-crash", "key-term", "topic-e2e", "note-e2e")
	})
	return p, stdout
}

// Log is what the process wrote to stderr so far.
func (p *Proc) Log() string { return p.stderr.String() }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Proc) Kill(t *testing.T) {
	t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatalf("kill demo-api: %v", err)
	}
	<-p.Exited
}

// Post sends a create as alice.
func (p *Proc) Post(key string, header ...string) (*http.Response, string, error) {
	resp, body, err := PostCreate(context.Background(), p.URL, TokenAlice, key, `{"topic":"topic-e2e","note":"note-e2e"}`, header...)
	return resp, string(body), err
}

// Do sends method path as alice, as Send does.
func (p *Proc) Do(method, path, key string, header ...string) (*http.Response, []byte, error) {
	return Send(context.Background(), method, p.URL+path, TokenAlice, key, "", header...)
}

// WaitInProgress polls the outcome route until key is claimed.
func (p *Proc) WaitInProgress(t *testing.T, key string) {
	t.Helper()
	if !Eventually(10*time.Second, func() bool {
		_, b, err := p.Do(http.MethodGet, "/v1/idempotency-keys/"+key, "")
		return err == nil && strings.Contains(string(b), `"state":"in_progress"`)
	}) {
		t.Fatalf("key %s never showed in progress", key)
	}
}

// Get is the body of GET url.
func Get(t *testing.T, url string) string {
	t.Helper()
	_, b, err := Send(context.Background(), http.MethodGet, url, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ServeInProcess runs serve of run (a command's main) in this process on a
// fresh database until the test ends, and returns its base URL and database.
func ServeInProcess(t *testing.T, run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error,
	env ...string) (string, *sqlx.DB) {
	t.Helper()
	dbURL := pgtest.NewURL(t)
	vars := map[string]string{}
	for _, kv := range serveEnv(dbURL, append([]string{"LOG_FORMAT=json"}, env...)...) {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, w, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop within 30s of its cancel")
		}
	})
	url := listening(t, out, func() string { return "" })
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return url, db
}

// Recorder is a reverse proxy that records each POST and adds headers to
// chosen attempts.
type Recorder struct {
	mu    sync.Mutex
	Posts []Post
	Add   map[string]map[string]string // X-Client-Attempt → headers
	Each  func(*http.Request)          // sees every call; panic(http.ErrAbortHandler) closes it unanswered
}

// Post is a POST that went through a Recorder.
type Post struct{ Path, Key, Attempt string }

// Proxy starts the recorder in front of target and returns its URL.
func (rec *Recorder) Proxy(t *testing.T, target string) string {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	return ServeUntilTheEnd(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			rec.mu.Lock()
			rec.Posts = append(rec.Posts, Post{r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Client-Attempt")})
			rec.mu.Unlock()
			for k, v := range rec.Add[r.Header.Get("X-Client-Attempt")] {
				r.Header.Set(k, v)
			}
		}
		if rec.Each != nil {
			rec.Each(r)
		}
		rp.ServeHTTP(w, r)
	})).URL
}

// CheckAttempts fails unless every attempt carried key, numbered 1..n.
func (rec *Recorder) CheckAttempts(t *testing.T, key string) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, p := range rec.Posts {
		if p.Key != key || p.Attempt != strconv.Itoa(i+1) {
			t.Fatalf("attempt %d carried key %s, X-Client-Attempt %s; want %s, %d", i+1, p.Key, p.Attempt, key, i+1)
		}
	}
}

// Walkthrough runs the sh blocks of the README's "## Try every branch" as
// each participant at once (ME=...), and checks what their comments name.
func Walkthrough(t *testing.T, readmePath string, env []string, participants ...string) {
	t.Helper()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the walkthrough needs %s on PATH (apt-get install %[1]s)", tool)
		}
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 250 {
		t.Errorf("%s has %d lines; keep it to 250 (link to docs/ for the rest)", readmePath, n)
	}
	section := regexp.MustCompile(`(?s)## Try every branch\n.*?(\n## |\z)`).FindString(string(readme))
	if section == "" {
		t.Fatal("the README has no walkthrough (## Try every branch)")
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		if !strings.Contains(m[1], "make run") {
			blocks = append(blocks, m[1])
		}
	}
	if len(blocks) < 5 {
		t.Fatalf("%d blocks in the walkthrough", len(blocks))
	}
	dir := t.TempDir() // a checkout after make run, the one block not run: ./bin/demo-api
	if err := errors.Join(os.Mkdir(filepath.Join(dir, "bin"), 0o755), os.Symlink(Binary, filepath.Join(dir, "bin", "demo-api"))); err != nil {
		t.Fatal(err)
	}
	// Each block's start and each curl's end are stamped in the output
	// (on stderr, which no block captures), so that a Retry-After can be
	// held to the time the block took (retryAfterHolds).
	script := strings.Builder{}
	script.WriteString(`now() { echo "${EPOCHREALTIME:-$(date +%s)}"; }
curl() { command curl "$@"; local rc=$?; echo "@@ curl done $(now)" >&2; return $rc; }
`)
	for i, b := range blocks {
		script.WriteString("echo \"@@ block " + string(rune('a'+i)) + " $(now)\"\n" + b + "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs := make([][]byte, len(participants))
	var wg sync.WaitGroup
	for i, me := range participants {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, "bash", "-O", "expand_aliases", "-s")
			cmd.Dir = dir
			cmd.Env = append(append(os.Environ(), env...), "ME="+me)
			cmd.Stdin = strings.NewReader(script.String())
			outs[i], _ = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i, me := range participants {
		checkWalkthrough(t, me, blocks, string(outs[i]))
	}
}

// checkWalkthrough checks what the blocks printed for me against their comments.
func checkWalkthrough(t *testing.T, me string, blocks []string, out string) {
	t.Helper()
	marker := regexp.MustCompile(`(?m)^@@ block [a-z] (\S+)\n`)
	outs := marker.Split(out, -1)[1:]
	starts := marker.FindAllStringSubmatch(out, -1)
	if len(outs) != len(blocks) {
		t.Fatalf("ME=%s: %d of %d blocks ran:\n%s", me, len(outs), len(blocks), out)
	}
	status := regexp.MustCompile(`#\s+(\d{3})\b`)
	exit := regexp.MustCompile(`#.*exit (\d)\b`)
	got := regexp.MustCompile(`(?m)^HTTP/1\.1 (\d{3})`)
	for i, b := range blocks {
		if err := retryAfterHolds(b, outs[i], starts[i][1]); err != nil {
			t.Errorf("ME=%s, block %d: %v:\n%s", me, i+1, err, outs[i])
		}
		var want, seen []string
		for line := range strings.SplitSeq(b, "\n") {
			if m := status.FindStringSubmatch(line); m != nil {
				want = append(want, m[1])
			}
			if m := exit.FindStringSubmatch(line); m != nil && !strings.Contains(outs[i], "exit "+m[1]) {
				t.Errorf("ME=%s, block %d: want exit %s:\n%s\n---\n%s", me, i+1, m[1], b, outs[i])
			}
		}
		for _, m := range got.FindAllStringSubmatch(outs[i], -1) {
			seen = append(seen, m[1])
		}
		if strings.Join(seen, " ") != strings.Join(want, " ") {
			t.Errorf("ME=%s, block %d answered %v, its comments say %v:\n%s\n---\n%s", me, i+1, seen, want, b, outs[i])
		}
		if strings.Contains(b, " workshop ") && (!strings.Contains(outs[i], "PASS") || strings.Contains(outs[i], "FAIL")) {
			t.Errorf("ME=%s, block %d: the workshop step did not pass:\n%s", me, i+1, outs[i])
		}
		if got, want := strings.Count(outs[i], "Idempotent-Replayed: true"), strings.Count(b, "replayed"); strings.Contains(b, "201, replayed") && got != want {
			t.Errorf("ME=%s, block %d: %d replays, its comments say %d:\n%s", me, i+1, got, want, outs[i])
		}
	}
}

// retryAfterHolds reports a comment's "Retry-After: N" in block that out,
// the block's output from start on, does not bear out. The header counts
// the whole seconds, up, to a moment N+1 seconds after the claim: N for a
// retry answered a second or so after the claim, as the README's blocks
// send it, N+1 sooner (the request it waits behind started late), and one
// less for each further second its answer took on a busy machine. The
// stamps bound that time: the claim is made after the block starts, the
// retry answered before its curl ends; stamps in whole seconds (a bash
// without EPOCHREALTIME) widen the bound by one.
func retryAfterHolds(block, out, start string) error {
	header := regexp.MustCompile(`(?mi)^Retry-After: (\d+)\r?$`)
	done := regexp.MustCompile(`(?m)^@@ curl done (\S+)$`)
	begun := stamp(start)
	for _, c := range regexp.MustCompile(`Retry-After: (\d+)`).FindAllStringSubmatch(block, -1) {
		n, _ := strconv.Atoi(c[1])
		var seen []int
		held := false
		for _, h := range header.FindAllStringSubmatchIndex(out, -1) {
			got, _ := strconv.Atoi(out[h[2]:h[3]])
			seen = append(seen, got)
			least := n // the retry answered within two seconds of the claim
			if d := done.FindStringSubmatch(out[h[1]:]); d != nil {
				took := stamp(d[1]) - begun // at least the claim's age when the retry was answered
				if !strings.Contains(start+d[1], ".") {
					took++
				}
				least = min(n, int(math.Ceil(float64(n+1)-took)))
			}
			held = held || (least <= got && got <= n+1)
		}
		if !held {
			return fmt.Errorf("Retry-After %v, where its comment says %d (or %d, or less by the seconds its answer came late)", seen, n, n+1)
		}
	}
	return nil
}

// stamp is the seconds of a shell's stamp ($EPOCHREALTIME, whose decimal
// mark follows the locale, or date +%s).
func stamp(s string) float64 {
	f, _ := strconv.ParseFloat(strings.Replace(s, ",", ".", 1), 64)
	return f
}
