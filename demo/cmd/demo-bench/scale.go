package main

// The scale mode (-scale, make bench-scale): what a create and a replay cost
// as the key table grows, and how the table and its sweeper hold under
// steady churn. It reuses the bench's pieces: the cluster (pgtest), the
// real server (startAPI), the load (closedLoop, client), the CPU meter and
// the statement counters (statsDB).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// scaleOptions are the knobs of the scale mode; -rounds, -duration,
// -warmup and -strict are the bench's.
type scaleOptions struct {
	on            bool
	levels        []int // live keys the table is filled to, in order
	ttl           time.Duration
	churnRate     float64 // creates per second
	churnTTL      time.Duration
	churnPeriods  int
	sweepInterval time.Duration // 0: churnTTL/15
	sweepBatch    int
	churnDefaults bool   // churn again with the key table's autovacuum settings reset, if the migrations set any
	churnTry      string // storage parameters of the key table to churn again with, e.g. autovacuum_vacuum_scale_factor=0.02
	sharedBuffers string
	prewarm       bool
	out           string
}

// register adds the scale mode's flags to fs.
func (so *scaleOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&so.on, "scale", false, "the scale mode (make bench-scale): create and replay at growing key tables, then the steady churn; writes -scale-out")
	fs.Func("scale-levels", "live keys to fill the key table to, in order, comma-separated (default 0,1000000,10000000)", func(s string) error {
		levels, err := parseLevels(s)
		so.levels = levels
		return err
	})
	fs.DurationVar(&so.ttl, "scale-ttl", 24*time.Hour, "the TTL of the filled keys and of the servers of the levels")
	fs.Float64Var(&so.churnRate, "churn-rate", 500, "creates per second of the steady churn (0: no churn)")
	fs.DurationVar(&so.churnTTL, "churn-ttl", 30*time.Second, "the TTL of the steady churn")
	fs.IntVar(&so.churnPeriods, "churn-periods", 6, "TTL periods of the churn: the first reaches the steady state, the others are judged")
	fs.DurationVar(&so.sweepInterval, "churn-sweep-interval", 0, "SWEEP_INTERVAL of the churn's server (0: the churn's TTL / 15)")
	fs.IntVar(&so.sweepBatch, "churn-sweep-batch", 500, "SWEEP_BATCH of the churn's server")
	fs.BoolVar(&so.churnDefaults, "churn-defaults", true, "where the migrations set autovacuum settings on the key table, churn again with them reset to PostgreSQL's, to compare")
	fs.StringVar(&so.churnTry, "churn-try", "", "storage parameters to churn again with, to compare, e.g. autovacuum_vacuum_scale_factor=0.02,autovacuum_vacuum_threshold=1000")
	fs.StringVar(&so.sharedBuffers, "scale-shared-buffers", "8GB", "the cluster's shared_buffers: 8GB holds the key table and its indexes at 10 M keys")
	fs.BoolVar(&so.prewarm, "scale-prewarm", true, "after each fill, read the key table and then its indexes into shared buffers (pg_prewarm), as a server that has run a while holds what it reads")
	fs.StringVar(&so.out, "scale-out", "docs/scale.md", "markdown file to write the scale report into, relative to the repository (empty: none)")
	so.levels = []int{0, 1_000_000, 10_000_000}
}

func parseLevels(s string) ([]int, error) {
	var levels []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a number of keys", f)
		}
		if len(levels) > 0 && n < levels[len(levels)-1] {
			return nil, fmt.Errorf("levels must grow: %d after %d", n, levels[len(levels)-1])
		}
		levels = append(levels, n)
	}
	if len(levels) == 0 {
		return nil, fmt.Errorf("no levels")
	}
	return levels, nil
}

// The scale mode's cluster settings: checkpoints far enough apart that a
// level's fill is not all checkpoints, and pg_stat_statements for the
// statements' buffer counts.
const scaleMaxWAL = "4GB"

// bytesPerKey is what a filled key takes on disk with its share of the
// indexes (heap row about 560 bytes, primary key 110 to 150, expiry index
// about 30), rounded up; walPerKey is the WAL a fill writes per key, which
// PostgreSQL keeps up to about twice max_wal_size (scaleMaxWAL).
const (
	bytesPerKey = 800
	walPerKey   = 1200
	scaleWALCap = 2 * (4 << 30)
)

// diskNeed is the disk the run needs in the temporary folder, at most: the
// keys, the WAL, and a margin for the sort of a fill's keys and the
// business rows.
func (so scaleOptions) diskNeed() int64 {
	keys := int64(slices.Max(so.levels)) + int64(so.churnRate*so.churnTTL.Seconds())*2
	return keys*bytesPerKey + min(keys*walPerKey, scaleWALCap) + 1<<30
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// scaleRun is one run of the scale mode.
type scaleRun struct {
	o        options
	so       scaleOptions
	progress io.Writer
	rep      scaleReport
	stats    *statsDB
	beside   *besideTable
	cpu      *cpuMeter
	root     string // the repository
}

// besideTable is a server on an empty key table of its own, measured in
// the same rounds as each level.
type besideTable struct {
	cl    *client
	db    *sqlx.DB
	stats *statsDB
}

func (s *scaleRun) logf(format string, args ...any) {
	fmt.Fprintf(s.progress, "demo-bench -scale: "+format+"\n", args...)
}

func runScale(ctx context.Context, o options, so scaleOptions, stdout, stderr io.Writer) (int, error) {
	began := time.Now()
	s := &scaleRun{o: o, so: so, progress: stderr}
	s.rep.opts, s.rep.so, s.rep.started = o, so, began
	s.rep.command = "`make bench-scale` (that is `go run ./cmd/demo-bench -scale`)"
	if len(os.Args) > 2 || (len(os.Args) == 2 && os.Args[1] != "-scale") {
		s.rep.command = "`go run ./cmd/demo-bench " + strings.Join(os.Args[1:], " ") + "`"
	}
	need := so.diskNeed()
	s.rep.diskNeed = need
	free, ok := freeDisk(os.TempDir())
	if ok {
		s.logf("needs up to %s of disk in %s (%d keys at most, about %d bytes each with their indexes, and the WAL, up to twice max_wal_size=%s); %s free",
			gib(need), os.TempDir(), slices.Max(so.levels), bytesPerKey, scaleMaxWAL, gib(free))
		if free < need {
			return 1, fmt.Errorf("not enough disk in %s: %s free, %s needed (fewer keys: -scale-levels)", os.TempDir(), gib(free), gib(need))
		}
	} else {
		s.logf("needs up to %s of disk in %s (free space not checked on this OS)", gib(need), os.TempDir())
	}

	l, err := startLab(ctx, "demo-bench-scale-", s.logf, pgtest.Options{Settings: map[string]string{
		"shared_buffers": so.sharedBuffers,
		"max_wal_size":   scaleMaxWAL,
	}})
	if err != nil {
		return 1, err
	}
	defer l.stop()
	root, tmp, bin, pg, admin := l.root, l.tmp, l.bin, l.pg, l.admin
	s.root = root
	s.rep.env = l.env
	for _, name := range []string{"max_wal_size", "checkpoint_timeout", "autovacuum_naptime", "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_cost_limit", "autovacuum_vacuum_cost_delay"} {
		var v string
		if err := admin.GetContext(ctx, &v, `SELECT current_setting($1)`, name); err == nil {
			s.rep.env.Settings = append(s.rep.env.Settings, name+"="+v)
		}
	}

	if hp := hugePages(); hp != "" {
		s.rep.env.Settings = append(s.rep.env.Settings, hp)
	}

	if err := s.levels(ctx, admin, pg, bin, tmp); err != nil {
		return 1, err
	}
	if so.churnRate > 0 {
		variants := []string{churnMigrated}
		if so.churnTry != "" {
			variants = append(variants, churnWith+so.churnTry)
		}
		if so.churnDefaults {
			variants = append(variants, churnDefaults)
		}
		for _, v := range variants {
			if err := s.churn(ctx, admin, pg, bin, tmp, v); err != nil {
				return 1, err
			}
		}
	}
	if ctx.Err() != nil {
		return 1, ctx.Err()
	}
	s.rep.elapsed = time.Since(began)
	s.rep.diskUsed = s.rep.peakDisk

	md, err := s.rep.markdown()
	if err != nil {
		return 1, err
	}
	return publish(md, &s.rep, root, so.out, o.strict, "demo-bench -scale", s.logf, stdout, stderr)
}

// levels fills one key table to each level in turn and measures the create
// and the replay at each.
func (s *scaleRun) levels(ctx context.Context, admin *sqlx.DB, pg *pgtest.Server, bin, tmp string) error {
	dbName := fmt.Sprintf("demo_scale_%d", os.Getpid())
	dbid, pgss, err := setupDatabase(ctx, admin, dbName)
	if err != nil {
		return err
	}
	defer admin.ExecContext(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+dbName+` WITH (FORCE)`)
	if !pgss {
		return fmt.Errorf("the scale mode needs pg_stat_statements (is TEST_DATABASE_URL set? it needs a cluster of its own)")
	}
	s.stats = &statsDB{admin: admin, dbid: dbid, pgss: true}
	// The empty table, measured in the same rounds as each level, so that
	// a ratio compares requests minutes apart at most.
	emptyName := dbName + "_empty"
	emptyID, _, err := setupDatabase(ctx, admin, emptyName)
	if err != nil {
		return err
	}
	defer admin.ExecContext(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+emptyName+` WITH (FORCE)`)
	token := "bench-" + randHex(16)
	env := []string{"IDEMPOTENCY_TTL=" + s.so.ttl.String()}
	srv, err := startServer(ctx, "server", []string{bin, "serve"}, tmp, append(serverEnv(pg.URL(dbName), token), env...))
	if err != nil {
		return err
	}
	defer srv.stop()
	emptySrv, err := startServer(ctx, "server-empty", []string{bin, "serve"}, tmp, append(serverEnv(pg.URL(emptyName), token), env...))
	if err != nil {
		return err
	}
	defer emptySrv.stop()
	emptyDB, err := sqlx.Open("postgres", pg.URL(emptyName))
	if err != nil {
		return err
	}
	defer emptyDB.Close()
	emptyDB.SetMaxOpenConns(1)
	s.beside = &besideTable{cl: newClient(emptySrv, nil, nil, nil, nil, token, 64), db: emptyDB, stats: &statsDB{admin: admin, dbid: emptyID, pgss: true}}
	s.cpu = &cpuMeter{serverPids: []int{srv.cmd.Process.Pid, emptySrv.cmd.Process.Pid}}
	if cpuMeasured {
		if s.cpu.postmasterPid, err = postmasterPid(ctx, s.stats); err != nil {
			s.logf("CPU of PostgreSQL not measured: %v", err)
		}
	}
	db, err := sqlx.Open("postgres", pg.URL(dbName))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	if s.so.prewarm {
		if _, err := db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_prewarm`); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err != nil {
		s.logf("no pgstattuple (%v): the primary key's depth and density are not measured", err)
	} else {
		s.rep.pgstattuple = true
	}
	cl := newClient(srv, nil, nil, nil, nil, token, 64)
	tpl, err := templateKey(ctx, cl, srv)
	if err != nil {
		return err
	}
	f := &fill{db: db, seed: randHex(8), tpl: tpl, total: max(slices.Max(s.so.levels), 1), ttl: s.so.ttl, margin: time.Hour,
		progress: func(rows int, took time.Duration) {
			s.logf("fill: %d keys (%.0f keys/s)", rows, float64(rows)/took.Seconds())
		}}
	for _, level := range s.so.levels {
		lv := levelRun{keys: level}
		began := time.Now()
		before := f.rows
		if err := f.to(ctx, level); err != nil {
			return err
		}
		lv.fillTook = time.Since(began)
		lv.filled = level - before
		// A table as autovacuum leaves it, and no checkpoint due inside a
		// phase because of the fill.
		if _, err := db.ExecContext(ctx, `VACUUM (ANALYZE) idempotency_keys`); err != nil {
			return err
		}
		if _, err := admin.ExecContext(ctx, `CHECKPOINT`); err != nil {
			return err
		}
		if s.so.prewarm {
			// The table first: where it and its indexes outgrow the
			// buffers, the indexes, read last, stay.
			if _, err := db.ExecContext(ctx, `SELECT pg_prewarm(r) FROM unnest(ARRAY['idempotency_keys'::regclass] ||
				ARRAY(SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'idempotency_keys'::regclass)) AS r`); err != nil {
				return err
			}
		}
		lv.settleTook = time.Since(began) - lv.fillTook
		s.logf("level %d keys: filled %d in %s, settled in %s", level, lv.filled, lv.fillTook.Round(time.Second), lv.settleTook.Round(time.Second))
		cp0, err := checkpoints(ctx, admin)
		if err != nil {
			return err
		}
		if err := s.measureLevel(ctx, cl, f, &lv); err != nil {
			return err
		}
		cp1, err := checkpoints(ctx, admin)
		if err != nil {
			return err
		}
		lv.checkpoints = cp1 - cp0
		if lv.table, err = readTableStats(ctx, db, s.rep.pgstattuple); err != nil {
			return err
		}
		lv.table.rows = int64(f.rows-f.swept) + 1 + cl.created.Load() // the fill, the template, the creates
		if level > 0 && level <= hashIndexUpTo {
			if lv.hashIndex, err = hashIndexSize(ctx, db); err != nil {
				return err
			}
		}
		if level > 0 {
			if lv.sweep, err = s.sweepLevel(ctx, admin, pg.URL(dbName), db, f, level/100); err != nil {
				return err
			}
		}
		s.notePeakDisk(ctx, admin)
		s.rep.levels = append(s.rep.levels, lv)
	}
	return nil
}

// templateKey makes one real completed key through the API, the one the
// fills copy.
func templateKey(ctx context.Context, cl *client, srv *serverProc) (keyTemplate, error) {
	key := uuid.NewString()
	r := cl.post(ctx, srv, key, 0, createBody)
	if r.err != nil || r.status != http.StatusCreated {
		return keyTemplate{}, fmt.Errorf("the first create: %s", describe(r))
	}
	return keyTemplate{actor: "bench", operation: "demo-requests.create", key: key}, nil
}

// levelScenarios are the scenarios measured at each level.
var levelScenarios = []string{scCreate, scReplay}

// levelConcurrencies are the numbers of clients measured at each level.
var levelConcurrencies = []int{8, 32}

// measureLevel runs the rounds at one level: a warm-up of each scenario,
// then in each round every scenario at every concurrency, the order
// rotated. At the largest level, where the targets are judged, each runs
// on the empty table beside it too.
func (s *scaleRun) measureLevel(ctx context.Context, cl *client, f *fill, lv *levelRun) error {
	beside := lv.keys == slices.Max(s.so.levels)
	for _, sc := range levelScenarios {
		req, after := s.levelRequest(cl, sc, f, 8)
		closedLoop(ctx, 8, time.Second, 0, req)
		after()
		if beside {
			req, after = s.beside.cl.scenario(sc, 8)
			closedLoop(ctx, 8, time.Second, 0, req)
			after()
		}
	}
	// The warm-up's creates are most of a small table: statistics of the
	// table before them would have the server's statements planned for a
	// table of a page, and ANALYZE makes them plan again.
	dbs := []*sqlx.DB{f.db}
	if beside {
		dbs = append(dbs, s.beside.db)
	}
	for _, db := range dbs {
		if _, err := db.ExecContext(ctx, `ANALYZE idempotency_keys`); err != nil {
			return err
		}
	}
	type cell struct {
		sc string
		c  int
	}
	var order []cell
	for _, c := range levelConcurrencies {
		for _, sc := range levelScenarios {
			order = append(order, cell{sc, c})
		}
	}
	for r := 1; r <= s.o.rounds; r++ {
		k := (r - 1) % len(order)
		for _, x := range append(slices.Clone(order[k:]), order[:k]...) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			level := func() error {
				return s.measurePhase(ctx, r, x.sc, x.c, func() (request, func()) { return s.levelRequest(cl, x.sc, f, x.c) },
					s.stats, fmt.Sprintf("level %d", lv.keys), &lv.phases)
			}
			empty := func() error {
				return s.measurePhase(ctx, r, x.sc, x.c, func() (request, func()) { return s.beside.cl.scenario(x.sc, x.c) },
					s.beside.stats, "empty", &lv.beside)
			}
			order := []func() error{level}
			if beside { // the level and the empty table take turns at going first
				order = append(order, empty)
				if r%2 == 0 {
					order[0], order[1] = empty, level
				}
			}
			for _, measure := range order {
				if err := measure(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// measurePhase warms up and then measures one scenario at c clients,
// with the requests newRequest makes, and appends the phase to phases.
func (s *scaleRun) measurePhase(ctx context.Context, round int, sc string, c int, newRequest func() (request, func()),
	stats *statsDB, label string, phases *[]levelPhase) error {
	req, after := newRequest()
	closedLoop(ctx, c, s.o.warmup, 0, req)
	after()
	req, after = newRequest()
	var lr loadResult
	var cpu cpuTimes
	pc, err := stats.measure(ctx, func() {
		before := s.cpu.sample()
		lr = closedLoop(ctx, c, s.o.duration, 0, req)
		cpu = s.cpu.sample().sub(before)
	})
	after()
	if err != nil {
		return err
	}
	bc, err := stats.blocks(ctx)
	if err != nil {
		return err
	}
	p := phase{round: round, scenario: sc, conc: c, load: lr, db: pc, cpu: cpu}
	*phases = append(*phases, levelPhase{phase: p, blocks: bc})
	s.logf("%s round %d/%d %-7s @%-2d %5.0f µs CPU/req %6.0f req/s p99 %7s  blocks/req hit %.1f read %.2f  WAL %4.0f B/req  JIT functions %d  errors %d %s",
		label, round, s.o.rounds, sc, c, p.cpuPerReq(), lr.rps(), ms(lr.quantile(.99)),
		p.perReq(bc.hit), p.perReq(bc.read), p.perReq(pc.walBytes), bc.jitFunctions, lr.errors, lr.firstErr)
	return nil
}

// levelRequest is the request of a scenario at a level: a create with a
// fresh key, or a replay of a key chosen at random among the filled ones
// (so that it is as cold as a client's retry of any live key), or, with
// none filled, among the creates.
func (s *scaleRun) levelRequest(cl *client, sc string, f *fill, workers int) (request, func()) {
	from := f.replayable()
	if sc != scReplay || f.rows == from {
		return cl.scenario(sc, workers)
	}
	rngs := make([]*rand.Rand, workers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return func(ctx context.Context, w, i int) (reply, bool) {
		key := scaleKey(f.seed, from+rngs[w].IntN(f.rows-from))
		r := cl.post(ctx, cl.api, key, 0, createBody)
		return r, r.err == nil && r.status == http.StatusCreated && r.replayed
	}, func() {}
}

// blockCounts are the shared buffers the app's statements used, from
// pg_stat_statements: found in shared buffers (hit), read from the
// operating system (read: its page cache or the disk), dirtied, and written
// out by the backend itself; and the functions JIT compiled.
type blockCounts struct{ hit, read, dirtied, written, jitFunctions int64 }

// blocks sums the block counts of the app's statements since the last
// reset.
func (s *statsDB) blocks(ctx context.Context) (blockCounts, error) {
	var b blockCounts
	err := s.admin.QueryRowxContext(ctx, `
SELECT coalesce(sum(shared_blks_hit), 0)::bigint, coalesce(sum(shared_blks_read), 0)::bigint,
       coalesce(sum(shared_blks_dirtied), 0)::bigint, coalesce(sum(shared_blks_written), 0)::bigint,
       coalesce(sum(jit_functions), 0)::bigint
FROM pg_stat_statements WHERE dbid = $1`, s.dbid).Scan(&b.hit, &b.read, &b.dirtied, &b.written, &b.jitFunctions)
	return b, err
}

// tableStats is the key table's shape at one moment.
type tableStats struct {
	rows                     int64 // the keys in the table
	heap, indexes, pkey      int64 // bytes: the table (with TOAST, free space and visibility maps), all its indexes, the primary key
	pkeyLevels               int   // pages a descent of the primary key reads (pgstatindex tree_level + 1)
	pkeyLeafDensity          float64
	pkeyLeafPages, pkeyPages int64
}

// readTableStats reads the key table's sizes and, with pgstattuple, the
// primary key's depth and density (a read of the whole index); not its
// rows, which the caller counts.
func readTableStats(ctx context.Context, db *sqlx.DB, pgstattuple bool) (tableStats, error) {
	var t tableStats
	if err := db.QueryRowxContext(ctx, `
SELECT pg_table_size('idempotency_keys'), pg_indexes_size('idempotency_keys'),
       pg_relation_size('idempotency_keys_pkey')`).Scan(&t.heap, &t.indexes, &t.pkey); err != nil {
		return t, err
	}
	t.pkeyPages = t.pkey / 8192
	if pgstattuple {
		if err := db.QueryRowxContext(ctx, `
SELECT tree_level + 1, avg_leaf_density, leaf_pages FROM pgstatindex('idempotency_keys_pkey')`).Scan(
			&t.pkeyLevels, &t.pkeyLeafDensity, &t.pkeyLeafPages); err != nil {
			return t, err
		}
	}
	return t, nil
}

// notePeakDisk records the cluster's size on disk, the largest so far.
func (s *scaleRun) notePeakDisk(ctx context.Context, admin *sqlx.DB) {
	var n int64
	if err := admin.GetContext(ctx, &n, `
SELECT (SELECT sum(pg_database_size(oid)) FROM pg_database)::bigint
     + (SELECT coalesce(sum(size), 0) FROM pg_ls_waldir())::bigint`); err == nil {
		s.rep.peakDisk = max(s.rep.peakDisk, n)
	}
}

// levelSweep is the sweeper's statement run at a level on the oldest keys,
// as if their time had come, and the VACUUM of what it left.
type levelSweep struct {
	rows                  int64
	sweepTook, vacTook    time.Duration
	sweepCPU, vacCPU      cpuTimes
	sweepWAL, vacWAL      int64
	statements, batch     int
	pkeyBefore, pkeyAfter int64
	err, plan             string // the sweeper's error, and the plan PostgreSQL chose for its statement then
}

// sweepLevel deletes the n oldest filled keys with the sweeper's own
// statement (postgres.Store.PurgeExpired, batch after batch as serve's
// sweeper does, with the store's clock set to when the n-th expires), then
// VACUUMs the table as autovacuum would after them, without its cost
// delay. The keys swept are no longer replayed.
func (s *scaleRun) sweepLevel(ctx context.Context, admin *sqlx.DB, url string, db *sqlx.DB, f *fill, n int) (levelSweep, error) {
	sw := levelSweep{batch: s.so.sweepBatch}
	if n == 0 {
		return sw, nil
	}
	var clock time.Time
	if err := db.GetContext(ctx, &clock, `SELECT expires_at FROM idempotency_keys WHERE lease_until IS NULL ORDER BY expires_at OFFSET $1 LIMIT 1`, n-1); err != nil {
		return sw, fmt.Errorf("the expiry of the %d-th oldest key: %w", n, err)
	}
	chores, err := postgres.Open(ctx, url, postgres.LongStatements)
	if err != nil {
		return sw, err
	}
	defer chores.Close()
	store := postgres.New(chores)
	store.Clock = func() time.Time { return clock }
	if err := db.GetContext(ctx, &sw.pkeyBefore, `SELECT pg_relation_size('idempotency_keys_pkey')`); err != nil {
		return sw, err
	}
	measure := func(took *time.Duration, cpu *cpuTimes, wal *int64, f func() error) error {
		before, err := s.stats.snapshot(ctx)
		if err != nil {
			return err
		}
		c0, t0 := s.cpu.sample(), time.Now()
		err = f()
		*took, *cpu = time.Since(t0), s.cpu.sample().sub(c0)
		after, serr := s.stats.snapshot(ctx)
		if err == nil {
			err = serr
		}
		*wal = after.walBytes - before.walBytes
		return err
	}
	if err := measure(&sw.sweepTook, &sw.sweepCPU, &sw.sweepWAL, func() error {
		var mark postgres.SweepMark
		for {
			d, next, err := store.PurgeExpired(ctx, sw.batch, mark)
			sw.rows += d
			sw.statements++
			if err != nil || next == nil {
				return err
			}
			mark = *next
		}
	}); err != nil {
		// The run goes on: a sweeper that fails at this size is what the
		// report must say, with the plan PostgreSQL chose for it.
		sw.err = err.Error()
		sw.plan = explainPurge(ctx, db, clock, sw.batch)
		s.logf("level %d keys: the sweeper failed after %d keys in %d statements: %v\n%s", f.rows, sw.rows, sw.statements, err, sw.plan)
	} else if sw.rows != int64(n) {
		return sw, fmt.Errorf("the sweeper deleted %d keys expired by %s, want the %d oldest", sw.rows, clock, n)
	}
	f.swept += int(sw.rows)
	if err := measure(&sw.vacTook, &sw.vacCPU, &sw.vacWAL, func() error {
		_, err := db.ExecContext(ctx, `VACUUM idempotency_keys`)
		return err
	}); err != nil {
		return sw, err
	}
	if err := db.GetContext(ctx, &sw.pkeyAfter, `SELECT pg_relation_size('idempotency_keys_pkey')`); err != nil {
		return sw, err
	}
	s.logf("level %d keys: the sweeper deleted the %d oldest in %d statements, %s (%.0f keys/s, WAL %.0f B per key); VACUUM took %s, WAL %.0f B per key deleted",
		f.rows, sw.rows, sw.statements, sw.sweepTook.Round(time.Millisecond), float64(sw.rows)/sw.sweepTook.Seconds(), float64(sw.sweepWAL)/float64(sw.rows),
		sw.vacTook.Round(time.Millisecond), float64(sw.vacWAL)/float64(sw.rows))
	return sw, nil
}

// checkpoints is how many checkpoints the cluster has started, timed and
// requested.
func checkpoints(ctx context.Context, admin *sqlx.DB) (int64, error) {
	var n int64
	err := admin.GetContext(ctx, &n, `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`)
	return n, err
}

// hashIndexUpTo is the largest level at which the bench builds an index on
// a hash of the scope to compare its size with the primary key's: the
// bytes per key do not depend on the level, and the build of one at 10 M
// keys would take a minute of the run.
const hashIndexUpTo = 1_000_000

// hashIndexSize builds, measures and drops an index on a 16-byte hash of
// the scope (md5 of actor, operation and key): what the primary key would
// weigh if the unique key were a fixed-width hash. It is built in one pass
// (leaves 90% full), where the primary key grew by inserts.
func hashIndexSize(ctx context.Context, db *sqlx.DB) (int64, error) {
	if _, err := db.ExecContext(ctx, `CREATE INDEX scale_scope_hash ON idempotency_keys
    ((decode(md5(actor_id || ':' || operation || ':' || idem_key), 'hex')))`); err != nil {
		return 0, err
	}
	var n int64
	err := db.GetContext(ctx, &n, `SELECT pg_relation_size('scale_scope_hash')`)
	if _, derr := db.ExecContext(ctx, `DROP INDEX scale_scope_hash`); err == nil {
		err = derr
	}
	return n, err
}

// explainPurge is the plan PostgreSQL chooses for the sweeper's statement
// with this clock and batch, or why there is none: the statement the
// function purge_expired_keys runs on idempotency_keys (the text between
// its $q$ marks, as its format() names the table).
func explainPurge(ctx context.Context, db *sqlx.DB, clock time.Time, batch int) string {
	var q string
	if err := db.GetContext(ctx, &q, `SELECT format(split_part(prosrc, '$q$', 2), 'idempotency_keys')
		FROM pg_proc WHERE oid = 'purge_expired_keys'::regproc`); err != nil {
		return "(" + err.Error() + ")"
	}
	var lines []string
	if err := db.SelectContext(ctx, &lines, "EXPLAIN "+q, clock, nil, "", "", "", batch); err != nil { // a sweep's first batch
		return "(EXPLAIN: " + err.Error() + ")"
	}
	return strings.Join(lines, "\n")
}

// hugePages says how many huge pages the operating system holds and how
// many are taken: PostgreSQL puts its shared memory in them when there are
// enough (huge_pages=try, its default). Empty where there is no
// /proc/meminfo (not Linux).
func hugePages() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return ""
	}
	var total, free, reserved int
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "HugePages_Total:":
			total = n
		case "HugePages_Free:":
			free = n
		case "HugePages_Rsvd:":
			reserved = n
		}
	}
	return fmt.Sprintf("huge pages: %d held by the operating system, %d taken", total, total-free+reserved)
}
