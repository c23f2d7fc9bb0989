// Command demo-bench is make bench: it starts a durable throw-away PostgreSQL
// (pg_stat_statements preloaded), the real demo-api binary, and itself again
// as the baseline server (baseline.go), then measures, in one run and
// alternating so that drift of the machine hits every scenario alike:
//
//   - baseline: POST /v1/demo-requests on the baseline server, the business
//     insert through the same HTTP pieces without the idempotency layer;
//   - baseline+outbox: the same on a second baseline server that also writes
//     the request's outbox row, the create's whole business effect;
//   - baseline+key: the same on a third that writes first the key row with
//     its answer, plainly: what a create must write, with nothing around it;
//   - create: POST /v1/demo-requests with a fresh Idempotency-Key, on the
//     one-phase path; create-2p: the same on a server on the two-phase path;
//   - replay: the same request again with a completed key; replay-a2: the
//     same with X-Client-Attempt: 2, as the client sends a retry;
//   - read: GET /v1/demo-requests/{id} of a created request, the read floor;
//
// each at 1, 8 and 32 closed-loop clients, in many short rounds, with the
// CPU per request of the servers and PostgreSQL as the primary figure (the
// targets' ratios are by it), then same-key storms (500
// requests released together on one fresh key). It also measures the SQL
// floor (the store's statements straight from Go), counts network round
// trips through a counting proxy, and times the dispatcher draining a backlog
// of outbox rows to the review desk (drain.go), and beside it the expedite,
// an operation of several steps with two calls to the desk, at 1 and 8
// clients, with the desk's calls per step (expedite.go).
//
// It prints a markdown report and writes it between the markers of
// docs/bench.md, with its charts (chart.go) next to it, and prints its
// progress, with the time left, to stderr. It exits 1 when a correctness check fails (a storm that made
// other than one business row, any 5xx or transport error, rows that do not
// match the 201s, expedites that do not match the desk's charges), and 0 otherwise: a missed performance target is printed as
// MISSED (exit 2 with -strict).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

type options struct {
	rounds        int
	duration      time.Duration
	warmup        time.Duration
	storms        int
	stormSize     int
	floorDuration time.Duration
	countRequests int
	drainRows     int
	expedite      int
	out           string
	strict        bool
	locale        string // the cluster's initdb --locale (empty: C)
	profile       string // profile.go: where the servers' profiles go; empty: none
}

var concurrencies = []int{1, 8, 32}

func main() {
	if len(os.Args) > 1 && os.Args[1] == baselineCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := serveBaseline(ctx, os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo-bench baseline server:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.rounds, "rounds", 9, "rounds; every figure is the median across rounds")
	flag.DurationVar(&o.duration, "duration", time.Second, "measured time of each phase")
	flag.DurationVar(&o.warmup, "warmup", 250*time.Millisecond, "unmeasured time before each phase")
	flag.IntVar(&o.storms, "storms", 2, "same-key storms per round")
	flag.IntVar(&o.stormSize, "storm-size", 500, "concurrent requests of a storm")
	flag.DurationVar(&o.floorDuration, "floor-duration", 1500*time.Millisecond, "time of each SQL floor loop")
	flag.IntVar(&o.countRequests, "count-requests", 200, "requests per scenario when counting network round trips")
	flag.IntVar(&o.drainRows, "drain-rows", 10000, "due outbox rows the dispatcher drains to the review desk (0: no drain)")
	flag.IntVar(&o.expedite, "expedite-rounds", 3, "rounds of the expedite at 1 and 8 clients, beside the drain's servers (0: none)")
	flag.StringVar(&o.out, "out", "docs/bench.md", "markdown file to write the results into, relative to the repository (empty: none)")
	flag.BoolVar(&o.strict, "strict", false, "exit 2 when a performance target is missed")
	flag.StringVar(&o.locale, "locale", "", "the cluster's locale (initdb --locale; empty: C), e.g. en_US.UTF-8 to measure a language collation; it must exist (locale -a)")
	flag.StringVar(&o.profile, "profile", "", "a folder for the servers' CPU and allocation profiles of round 1's phases at 8 clients (PPROF_ADDR); empty: none")
	var so scaleOptions
	so.register(flag.CommandLine)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var code int
	var err error
	if so.on {
		code, err = runScale(ctx, o, so, os.Stdout, os.Stderr) // scale.go
	} else {
		code, err = run(ctx, o, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-bench:", err)
		if code == 0 {
			code = 1
		}
	}
	stop()
	os.Exit(code)
}

// bench is one run.
type bench struct {
	o        options
	progress io.Writer
	eta      eta
	stats    *statsDB
	cpu      *cpuMeter
	benchDB  *sqlx.DB
	rep      report
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "demo-bench: "+format+"\n", args...)
}

// eta estimates the time left: the planned time of the stages not yet run,
// scaled by how the finished ones compared with their plan.
type eta struct {
	start         time.Time
	planned, done time.Duration
}

func (e *eta) left() time.Duration {
	left := e.planned - e.done
	if e.done > 0 {
		left = time.Duration(float64(left) * float64(time.Since(e.start)) / float64(e.done))
	}
	return left.Round(time.Second)
}

// stage runs f as a stage of the run that should take about planned,
// printing its start and its end with the time left.
func (b *bench) stage(name string, planned time.Duration, f func() error) error {
	b.logf("%s: starts; about %s left", name, b.eta.left())
	began := time.Now()
	err := f()
	b.eta.done += planned
	b.logf("%s: ends after %s; about %s left", name, time.Since(began).Round(100*time.Millisecond), b.eta.left())
	return err
}

// plan is the stages of a run and the time each should take (what the
// load runs, plus a guess at what the rest takes).
func (b *bench) plan() (round, storms, floor, counts, drain time.Duration) {
	o := b.o
	round = time.Duration(len(scenarios)*len(concurrencies)) * (o.warmup + o.duration + 100*time.Millisecond)
	storms = time.Duration(o.storms) * 300 * time.Millisecond
	floor = 12 * o.floorDuration
	counts = 3*time.Second + time.Duration(len(scenarios)*o.countRequests)*2*time.Millisecond
	drain = b.drainWait(o.drainRows)
	if o.expedite > 0 {
		drain += b.expediteWait(o.expedite)
	}
	return
}

// drainWait is how long the drain of rows should take (0 for none).
func (b *bench) drainWait(rows int) time.Duration {
	if rows == 0 {
		return 0
	}
	return 5*time.Second + time.Duration(rows)*time.Second/2000
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) (int, error) {
	began := time.Now()
	b := &bench{o: o, progress: stderr}
	b.rep.opts = o
	b.rep.started = began
	b.rep.command = "`make bench` (that is `go run ./cmd/demo-bench`, no arguments)"
	if len(os.Args) > 1 {
		b.rep.command = "`go run ./cmd/demo-bench " + strings.Join(os.Args[1:], " ") + "`"
	}
	l, err := startLab(ctx, "demo-bench-", b.logf, pgtest.Options{Locale: o.locale})
	if err != nil {
		return 1, err
	}
	defer l.stop()
	root, tmp, bin, pg, admin := l.root, l.tmp, l.bin, l.pg, l.admin
	dbName := fmt.Sprintf("demo_bench_%d", os.Getpid())
	dbid, pgss, err := setupDatabase(ctx, admin, dbName)
	if err != nil {
		return 1, err
	}
	defer func() { // only matters for TEST_DATABASE_URL: a started server is thrown away
		_, _ = admin.ExecContext(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+dbName+` WITH (FORCE)`)
	}()
	b.stats = &statsDB{admin: admin, dbid: dbid, pgss: pgss}
	if !pgss {
		b.logf("pg_stat_statements is not loaded on this server (TEST_DATABASE_URL?): statements are not counted")
	}
	dbURL := pg.URL(dbName)
	b.rep.env = l.env

	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return 1, err
		}
		extraServerEnv = append(extraServerEnv, "PPROF_ADDR=127.0.0.1:0")
	}
	token := "bench-" + randHex(16)
	srv, err := startAPI(ctx, "server", bin, tmp, dbURL, token) // migrates the database
	if err != nil {
		return 1, err
	}
	defer srv.stop()
	base, err := startBaseline(ctx, "baseline", tmp, dbURL, token)
	if err != nil {
		return 1, err
	}
	defer base.stop()
	baseOutbox, err := startBaseline(ctx, "baseline-outbox", tmp, dbURL, token, "BASELINE_OUTBOX=true")
	if err != nil {
		return 1, err
	}
	defer baseOutbox.stop()
	baseKey, err := startBaseline(ctx, "baseline-key", tmp, dbURL, token, "BASELINE_KEY=true")
	if err != nil {
		return 1, err
	}
	defer baseKey.stop()
	srv2p, err := startServer(ctx, "server-2p", []string{bin, "serve"}, tmp, append(serverEnv(dbURL, token), "IDEMPOTENCY_PATH=two_phase"))
	if err != nil {
		return 1, err
	}
	defer srv2p.stop()
	b.cpu = &cpuMeter{serverPids: []int{srv.cmd.Process.Pid, srv2p.cmd.Process.Pid, base.cmd.Process.Pid, baseOutbox.cmd.Process.Pid, baseKey.cmd.Process.Pid}}
	if !cpuMeasured {
		b.logf("CPU and memory: %s", notMeasured)
	} else if b.cpu.postmasterPid, err = postmasterPid(ctx, b.stats); err != nil {
		b.logf("CPU of PostgreSQL not measured: %v", err)
	}
	if b.benchDB, err = sqlx.Open("postgres", dbURL); err != nil {
		return 1, err
	}
	defer b.benchDB.Close()
	b.rep.env.Settings = append(b.rep.env.Settings, "schema="+schemaVersion(ctx, b.benchDB))
	b.benchDB.SetMaxOpenConns(8)

	round, storms, floor, counts, drain := b.plan()
	b.eta = eta{start: time.Now(), planned: time.Duration(len(scenarios))*time.Second + time.Duration(o.rounds)*(round+storms) + floor + counts + drain}
	cl := newClient(srv, srv2p, base, baseOutbox, baseKey, token, o.stormSize+64)
	if err := b.mainRounds(ctx, cl); err != nil {
		return 1, err
	}
	if cpuMeasured {
		peak, cur, err := srv.memory()
		if err != nil {
			return 1, err
		}
		b.rep.peakRSS, b.rep.rssAfter = peak, cur
	}
	if err := b.checkRows(ctx, cl); err != nil {
		return 1, err
	}

	if err := b.stage("SQL floor", floor, func() error { return b.floor(ctx, dbURL) }); err != nil {
		return 1, err
	}
	if err := b.stage("round trips", counts, func() error {
		return b.countRoundTrips(ctx, bin, tmp, pg.Config.Host, pg.Config.Port, dbURL, token)
	}); err != nil {
		return 1, err
	}
	// The drain and the expedite are stages of their own on one desk and
	// server (withDesk).
	if o.drainRows > 0 || o.expedite > 0 {
		if err := b.withDesk(ctx, admin, pg.URL, bin, tmp, token, o.drainRows, o.expedite); err != nil {
			return 1, err
		}
	}
	if ctx.Err() != nil {
		return 1, ctx.Err()
	}
	b.rep.elapsed = time.Since(began)

	return publish(b.rep.markdown(), &b.rep, root, o.out, o.strict, "demo-bench", b.logf, stdout, stderr)
}

// mainRounds runs the alternating rounds and the storms on srv.
func (b *bench) mainRounds(ctx context.Context, cl *client) error {
	round, storms, _, _, _ := b.plan()
	err := b.stage("warm-up", time.Duration(len(scenarios))*time.Second, func() error {
		for _, sc := range scenarios {
			req, after := cl.scenario(sc, 8)
			closedLoop(ctx, 8, time.Second, 0, req)
			after()
		}
		return ctx.Err()
	})
	for r := 1; r <= b.o.rounds && err == nil; r++ {
		err = b.stage(fmt.Sprintf("round %d/%d", r, b.o.rounds), round+storms, func() error { return b.round(ctx, cl, r) })
	}
	return err
}

// round runs every scenario at every concurrency, then the storms.
func (b *bench) round(ctx context.Context, cl *client, round int) error {
	// Rotate the order each round, so no scenario always runs first.
	k := (round - 1) % len(scenarios)
	order := append(append([]string{}, scenarios[k:]...), scenarios[:k]...)
	for _, c := range concurrencies {
		for _, sc := range order {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			req, after := cl.scenario(sc, c)
			closedLoop(ctx, c, b.o.warmup, 0, req)
			after()
			req, after = cl.scenario(sc, c)
			var lr loadResult
			var cpu cpuTimes
			measured := func() {
				before := b.cpu.sample()
				lr = closedLoop(ctx, c, b.o.duration, 0, req)
				cpu = b.cpu.sample().sub(before)
			}
			if b.o.profile != "" && round == 1 && c == profileConcurrency {
				phase := measured
				measured = func() {
					if err := profilePhase(ctx, b.o.profile, cl.serverOf(sc), sc, c, b.o.duration, phase); err != nil {
						b.logf("profile %s @%d: %v", sc, c, err)
					}
				}
			}
			pc, err := b.stats.measure(ctx, measured)
			after()
			if err != nil {
				return err
			}
			ph := phase{round: round, scenario: sc, conc: c, load: lr, db: pc, cpu: cpu}
			b.rep.phases = append(b.rep.phases, ph)
			b.logf("round %d/%d %-15s @%-2d %5.0f µs CPU/req %7.0f req/s  p50 %6s  p99 %6s  errors %d  stmts/req %.2f",
				round, b.o.rounds, sc, c, ph.cpuPerReq(), lr.rps(), ms(lr.quantile(.5)), ms(lr.quantile(.99)), lr.errors, ph.perReq(pc.calls))
		}
	}
	for i := 1; i <= b.o.storms; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st := cl.storm(ctx, b.o.stormSize)
		if err := b.benchDB.GetContext(ctx, &st.rows, `SELECT count(*) FROM demo_requests WHERE note = $1`, st.note); err != nil {
			return err
		}
		b.rep.storms = append(b.rep.storms, stormRun{round: round, stormResult: st})
		b.logf("round %d/%d storm %d: %d requests: 201 first %d, 201 replayed %d, 409 %d, 5xx %d, other %d; rows %d; %s",
			round, b.o.rounds, i, b.o.stormSize, st.first, st.replayed, st.conflict, st.s5xx, st.other, st.rows, ms(st.elapsed))
	}
	return nil
}

// checkRows compares the business rows with the 201s the server sent.
func (b *bench) checkRows(ctx context.Context, cl *client) error {
	var creates, inserts, effects, keyed int
	if err := b.benchDB.GetContext(ctx, &creates, `SELECT count(*) FROM demo_requests WHERE topic = 'bench-create'`); err != nil {
		return err
	}
	if err := b.benchDB.GetContext(ctx, &inserts, `SELECT count(*) FROM demo_requests WHERE topic = 'bench-insert'`); err != nil {
		return err
	}
	// A request of the outbox baseline counts once it has its outbox row.
	if err := b.benchDB.GetContext(ctx, &effects, `SELECT count(*) FROM demo_requests r JOIN outbox o ON o.request_id = r.id WHERE r.topic = 'bench-outbox'`); err != nil {
		return err
	}
	// One of the key baseline counts once it has its outbox row and its key row.
	if err := b.benchDB.GetContext(ctx, &keyed, `SELECT count(*) FROM demo_requests r JOIN outbox o ON o.request_id = r.id
JOIN idempotency_keys k ON k.actor_id = r.actor_id AND k.operation = 'create_demo_request' AND k.idem_key = r.id::text WHERE r.topic = 'bench-keyrow'`); err != nil {
		return err
	}
	b.rep.rowsCreate, b.rep.rowsBaseline, b.rep.rowsOutbox, b.rep.rowsKeyRow = creates, inserts, effects, keyed
	b.rep.sentCreate, b.rep.sentBaseline, b.rep.sentOutbox, b.rep.sentKeyRow = int(cl.created.Load()), int(cl.inserted.Load()), int(cl.effected.Load()), int(cl.keyed.Load())
	return nil
}

// floor times the store's statements straight from Go.
func (b *bench) floor(ctx context.Context, dbURL string) error {
	b.logf("SQL floor")
	var seq atomic.Int64
	for _, syncOff := range []bool{false, true} {
		url := dbURL
		if syncOff {
			url += "&synchronous_commit=off"
		}
		db, err := postgres.Open(ctx, url, postgres.KeyStatements)
		if err != nil {
			return err
		}
		insert, err := db.PreparexContext(ctx, baselineInsertSQL)
		if err != nil {
			db.Close()
			return err
		}
		fdb := floorDB{store: postgres.New(db), insert: insert}
		concs := []int{1, 8}
		if syncOff {
			concs = []int{1}
		}
		for _, w := range floorWorks() {
			if syncOff && w.name == "replay claim" {
				continue
			}
			for _, c := range concs {
				if ctx.Err() != nil {
					insert.Close()
					db.Close()
					return ctx.Err()
				}
				r := runFloor(ctx, fdb, w, c, b.o.floorDuration, &seq)
				r.syncOff = syncOff
				// Claims never finished would pile up and change the plans of
				// what follows (the finish can pick the in-progress index).
				if _, err := b.benchDB.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE actor_id = 'floor' AND state = 'in_progress'`); err != nil {
					insert.Close()
					db.Close()
					return err
				}
				b.rep.floor = append(b.rep.floor, r)
				b.logf("floor %-16s @%d%s: %6.0f ops/s p50 %s errors %d %s", w.name, c,
					map[bool]string{true: " (synchronous_commit=off)"}[syncOff], r.rps, ms(r.p50), r.errors, r.firstErr)
			}
		}
		insert.Close()
		db.Close()
	}
	return nil
}

// countRoundTrips runs each scenario, one request after the other, on a
// second pair of servers whose database connections go through a counting
// proxy.
func (b *bench) countRoundTrips(ctx context.Context, bin, tmp, host, port, dbURL, token string) error {
	var trips atomic.Int64
	proxy, err := pgtest.StartProxy(host+":"+port, func(c net.Conn) net.Conn { return &frontend{Conn: c, trips: &trips} })
	if err != nil {
		return err
	}
	defer proxy.Close()
	// Planning time too, for these sequential requests only.
	url := strings.Replace(dbURL, host+":"+port, proxy.Addr(), 1) + "&pg_stat_statements.track_planning=on"
	srv, err := startAPI(ctx, "server-counted", bin, tmp, url, token)
	if err != nil {
		return err
	}
	defer srv.stop()
	base, err := startBaseline(ctx, "baseline-counted", tmp, url, token)
	if err != nil {
		return err
	}
	defer base.stop()
	baseOutbox, err := startBaseline(ctx, "baseline-outbox-counted", tmp, url, token, "BASELINE_OUTBOX=true")
	if err != nil {
		return err
	}
	defer baseOutbox.stop()
	baseKey, err := startBaseline(ctx, "baseline-key-counted", tmp, url, token, "BASELINE_KEY=true")
	if err != nil {
		return err
	}
	defer baseKey.stop()
	srv2p, err := startServer(ctx, "server-2p-counted", []string{bin, "serve"}, tmp, append(serverEnv(url, token), "IDEMPOTENCY_PATH=two_phase"))
	if err != nil {
		return err
	}
	defer srv2p.stop()
	cl := newClient(srv, srv2p, base, baseOutbox, baseKey, token, 16)
	req, after := cl.scenario(scCreate, 1)
	closedLoop(ctx, 1, 0, 50, req) // keys to replay, and warm connections
	after()
	for _, sc := range scenarios {
		req, after := cl.scenario(sc, 1)
		trips.Store(0)
		var lr loadResult
		pc, err := b.stats.measure(ctx, func() { lr = closedLoop(ctx, 1, 0, b.o.countRequests, req) })
		after()
		if err != nil {
			return err
		}
		rc := roundTripCount{scenario: sc, requests: lr.n, errors: lr.errors,
			roundTrips: trips.Load(), statements: pc.calls, firstErr: lr.firstErr, db: pc}
		b.rep.counts = append(b.rep.counts, rc)
		b.logf("round trips %-8s: %.2f network, %.2f statements per request (errors %d %s)",
			sc, rc.perReq(rc.roundTrips), rc.perReq(rc.statements), lr.errors, lr.firstErr)
	}
	return nil
}

// describeCode names the commit measured, and how many files differ from it.
func describeCode(ctx context.Context, root string) string {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	head, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown (no git)"
	}
	status, _ := git("status", "--porcelain", "--untracked-files=no")
	if status == "" {
		return "commit " + head
	}
	return fmt.Sprintf("commit %s with uncommitted changes to %d tracked files", head, len(strings.Split(status, "\n")))
}

// describeEnv names the machine and the server settings that matter.
func describeEnv(ctx context.Context, admin *sqlx.DB, source string) environment {
	e := environment{GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), PGSource: source, OS: runtime.GOOS}
	switch runtime.GOOS {
	case "linux":
		e.OS = "Linux"
	case "darwin":
		e.OS = "macOS"
	case "windows":
		e.OS = "Windows"
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		e.MemBytes = kb << 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = strings.TrimSpace(string(b))
	}
	_ = admin.GetContext(ctx, &e.PGVersion, `SELECT split_part(version(), ' on ', 1)`)
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers", "max_connections", "lc_collate"} {
		var v string
		if err := admin.GetContext(ctx, &v, `SELECT current_setting($1)`, name); err == nil {
			e.Settings = append(e.Settings, name+"="+v)
		}
	}
	return e
}

// schemaVersion is the migration the database is at, as golang-migrate
// records it.
func schemaVersion(ctx context.Context, db *sqlx.DB) string {
	var v int
	if err := db.GetContext(ctx, &v, `SELECT version FROM schema_migrations`); err != nil {
		return "unknown"
	}
	return strconv.Itoa(v)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// A finished report: its charts and its verdict.
type finished interface {
	writeCharts(dir string) error
	verdict() (failures, misses []string)
}

// publish prints the report md, writes it between its markers into out
// (relative to root; empty: nowhere) with r's charts beside it, tells each
// failure and miss on stderr under name, and returns the exit status: 1 on
// a failure, 2 on a miss when strict.
func publish(md string, r finished, root, out string, strict bool, name string, logf func(string, ...any), stdout, stderr io.Writer) (int, error) {
	fmt.Fprint(stdout, md)
	if out != "" {
		path := out
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		if err := writeSection(path, md); err != nil {
			return 1, err
		}
		if err := r.writeCharts(filepath.Dir(path)); err != nil {
			return 1, err
		}
		logf("wrote %s and its charts", path)
	}
	failures, misses := r.verdict()
	for _, f := range failures {
		fmt.Fprintln(stderr, name+": FAILED:", f)
	}
	for _, m := range misses {
		fmt.Fprintln(stderr, name+": MISSED:", m)
	}
	switch {
	case len(failures) > 0:
		return 1, nil
	case len(misses) > 0 && strict:
		return 2, nil
	}
	return 0, nil
}
