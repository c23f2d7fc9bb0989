package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// The campaign's settings of the replicas: a short lease, so that a key a
// dead owner held is free again within the scenario, and a dispatcher that
// retries quickly.
const (
	token = "chaos-token-7f3e1a"
	actor = "chaos"
	lease = 4 * time.Second
)

// paths are the replicas' idempotency paths: the first creates in one
// statement (the service's own choice for a create), the second claims,
// works and finishes (as an operation with outside work would), so that a
// fault also meets claims in progress and their leases, and the two paths
// meet on the same keys.
var paths = [2]string{"one_phase", "two_phase"}

// env is what a campaign runs against.
type env struct {
	progress io.Writer
	tmp, bin string
	keep     bool // keep tmp, with the processes' logs, after the campaign
	pg       *pgtest.Server
	db       *sqlx.DB // the API's database, directly
	deskDB   *sqlx.DB
	desk     *proc
	replicas [2]*replica
	fo       *failoverState // during a failover scenario (failover.go)
	flood    *floodFigures  // during the flood scenario (flood.go)
	// transport is the clients': enough idle connections for every
	// worker, on both replicas.
	transport *http.Transport
}

// proc is a child process that prints "… listening on http://ADDR" first.
type proc struct {
	name string
	argv []string
	env  []string
	log  string
	url  string
	cmd  *exec.Cmd
	done chan error
}

// replica is a demo-api serve whose database link goes through a proxy.
type replica struct {
	*proc
	proxy *pgtest.Proxy
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, "demo-chaos: "+format+"\n", args...)
}

// setUp starts PostgreSQL, builds demo-api, and starts the desk and the two
// replicas.
func setUp(ctx context.Context, progress io.Writer) (_ *env, err error) {
	e := &env{progress: progress}
	e.transport = http.DefaultTransport.(*http.Transport).Clone()
	e.transport.MaxIdleConnsPerHost = 64
	defer func() {
		if err != nil {
			e.tearDown()
		}
	}()
	if e.tmp, err = os.MkdirTemp("", "demo-chaos-"); err != nil {
		return nil, err
	}
	e.logf("building ./cmd/demo-api")
	e.bin = filepath.Join(e.tmp, "demo-api")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", e.bin, "github.com/demo-api/demo-api/demo/cmd/demo-api").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/demo-api (run it inside the repository): %w\n%s", err, out)
	}
	e.logf("starting a durable PostgreSQL")
	if e.pg, err = pgtest.Start(ctx, pgtest.Options{Durable: true}); err != nil {
		return nil, err
	}
	admin, err := sqlx.Open("postgres", e.pg.URL("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	for _, name := range []string{"chaos", "chaos_desk"} {
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return nil, err
		}
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, err
		}
	}
	if e.db, err = sqlx.Open("postgres", e.pg.URL("chaos")); err != nil {
		return nil, err
	}
	if e.deskDB, err = sqlx.Open("postgres", e.pg.URL("chaos_desk")); err != nil {
		return nil, err
	}

	if e.desk, err = e.startDesk(ctx, "desk", e.pg.URL("chaos_desk")); err != nil {
		return nil, err
	}
	for i := range e.replicas {
		r := &replica{}
		if r.proxy, err = pgtest.StartProxy(net.JoinHostPort(e.pg.Config.Host, e.pg.Config.Port), nil); err != nil {
			return nil, err
		}
		u, _ := url.Parse(e.pg.URL("chaos"))
		u.Host = r.proxy.Addr()
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		r.proc = &proc{name: "replica-" + strconv.Itoa(i+1), argv: []string{e.bin, "serve"}, env: []string{
			"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + u.String(), "LISTEN_ADDR=" + addr,
			"API_TOKENS=" + actor + ":" + auth.Hash(token) + "," + floodActor + ":" + auth.Hash(floodToken), "LOG_FORMAT=json", "IDEMPOTENCY_LEASE=" + lease.String(),
			"SHUTDOWN_TIMEOUT=5s", "PROVIDER_URL=" + e.desk.url, "DISPATCH_CALL_TIMEOUT=1s",
			"DISPATCH_FIRST_RETRY=200ms", "DISPATCH_MAX_ATTEMPTS=6", "IDEMPOTENCY_PATH=" + paths[i], "WORKSHOP=true",
			"NEW_KEYS_PER_SECOND=1000000", "NEW_KEYS_BURST=1000000"}}
		e.replicas[i] = r
		if err := e.start(ctx, r.proc, "/readyz"); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// startDesk starts a review desk named name on the database at dbURL.
func (e *env) startDesk(ctx context.Context, name, dbURL string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	desk := &proc{name: name, argv: []string{e.bin, "provider"}, env: []string{
		"PATH=" + os.Getenv("PATH"), "PROVIDER_DATABASE_URL=" + dbURL,
		"PROVIDER_LISTEN_ADDR=" + addr, "PROVIDER_FAULTS=true", "LOG_FORMAT=json",
		"PROVIDER_CREDIT=" + strconv.Itoa(deskCredit)}}
	return desk, e.start(ctx, desk, "/readyz")
}

func (e *env) tearDown() {
	for _, r := range e.replicas {
		if r != nil {
			r.kill(syscall.SIGKILL)
			r.proxy.Close()
		}
	}
	if e.desk != nil {
		e.desk.kill(syscall.SIGKILL)
	}
	for _, db := range []*sqlx.DB{e.db, e.deskDB} {
		if db != nil {
			db.Close()
		}
	}
	e.transport.CloseIdleConnections()
	if e.pg != nil {
		e.pg.Stop()
	}
	if e.keep {
		e.logf("the processes' logs are in %s", e.tmp)
	} else if e.tmp != "" {
		os.RemoveAll(e.tmp)
	}
}

// start runs p, learns its address from its first line, and waits until
// ready answers 200.
func (e *env) start(ctx context.Context, p *proc, ready string) error {
	p.log = filepath.Join(e.tmp, p.name+".log")
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	p.cmd.Env, p.cmd.Stderr = p.env, logFile
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.cmd.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	_, addr, ok := strings.Cut(strings.TrimSpace(line), " listening on ")
	if !ok {
		p.kill(syscall.SIGKILL)
		return fmt.Errorf("%s printed no address; its log:\n%s", p.name, tail(p.log))
	}
	p.url = addr
	go io.Copy(io.Discard, stdout)
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if resp, err := hc.Get(p.url + ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready in 30 s; its log:\n%s", p.name, tail(p.log))
}

// kill sends sig and waits for the process to end (killing it after 10 s).
func (p *proc) kill(sig os.Signal) {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// deskFaults sets the review desk's faults, e.g. `{"down":true}`; `{}`
// clears them.
func (e *env) deskFaults(f string) error {
	req, _ := http.NewRequest(http.MethodPut, e.desk.url+"/v1/faults", strings.NewReader(f))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("desk faults %s: %d", f, resp.StatusCode)
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}

// logMarks are the sizes of the replicas' logs at a moment, to read what
// they logged since.
type logMarks [2]int64

func (e *env) markLogs() logMarks {
	var m logMarks
	for i, r := range e.replicas {
		if fi, err := os.Stat(r.log); err == nil {
			m[i] = fi.Size()
		}
	}
	return m
}

// outcomesSince counts the idempotency outcomes of the creates the
// replicas logged since m (a replica's log outlives its restarts).
func (e *env) outcomesSince(m logMarks) (map[string]int, error) {
	out := map[string]int{}
	for i, r := range e.replicas {
		f, err := os.Open(r.log)
		if err != nil {
			return nil, err
		}
		if _, err := f.Seek(m[i], io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg, Route, Outcome, Actor string
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "request" && line.Route == "/v1/demo-requests" && line.Outcome != "" && line.Actor == actor {
				out[line.Outcome]++
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// withEnv returns env with the variables of set replaced or added.
func withEnv(env []string, set ...string) []string {
	out := slices.Clone(env)
	for _, kv := range set {
		name, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(s string) bool { return strings.HasPrefix(s, name+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}
