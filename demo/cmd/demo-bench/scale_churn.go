package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// The churn's variants: the key table as the migrations leave it, with
// storage parameters set on top (churnWith and the parameters), and with
// its autovacuum settings reset to PostgreSQL's defaults.
const (
	churnMigrated = "as migrated"
	churnWith     = "with "
	churnDefaults = "autovacuum defaults"
)

// churnSample is the key table at one moment of the churn.
type churnSample struct {
	at                   time.Duration // since the churn's start
	heap, indexes        int64         // pg_table_size, pg_indexes_size
	live, dead           int64         // n_live_tup, n_dead_tup
	keys, expired        int64         // rows, and rows past their expiry not yet swept (counted)
	autovacuums, deletes int64         // autovacuum_count, n_tup_del so far
}

func (c churnSample) size() int64 { return c.heap + c.indexes }

// churnRun is one steady churn: creates at a fixed rate with a short TTL,
// the sweeper on, the table sampled.
type churnRun struct {
	variant    string
	reloptions []string // the key table's storage parameters during the churn
	rate       float64
	ttl        time.Duration
	periods    int
	interval   time.Duration // SWEEP_INTERVAL
	batch      int           // SWEEP_BATCH
	prefilled  int
	samples    []churnSample

	// Over the judged periods (all but the first):
	load        loadResult // creates, latency from when each was due
	dropped     int        // creates not sent: every sender busy
	judged      time.Duration
	cpu         cpuTimes
	walBytes    int64
	sweepCalls  int64   // the sweeper's statements (pg_stat_statements)
	sweepExec   float64 // ms, their execution time
	autovacuums int64
	deletes     int64 // the key table's n_tup_del: only the sweeper deletes keys
}

// judgedFrom is the sample index where the judged periods start.
func (c *churnRun) judgedSamples() []churnSample {
	var out []churnSample
	for _, s := range c.samples {
		if s.at >= c.ttl {
			out = append(out, s)
		}
	}
	return out
}

// churn runs one steady churn in a database of its own: a server with a
// short TTL and the sweeper on, the table filled with a TTL's worth of keys
// that expire evenly (so that the churn starts at its steady live count),
// then creates at the fixed rate for the periods.
func (s *scaleRun) churn(ctx context.Context, admin *sqlx.DB, pg *pgtest.Server, bin, tmp, variant string) error {
	so := s.so
	ch := &churnRun{variant: variant, rate: so.churnRate, ttl: so.churnTTL, periods: so.churnPeriods,
		interval: so.sweepInterval, batch: so.sweepBatch}
	if ch.interval <= 0 {
		ch.interval = max(so.churnTTL/15, 100*time.Millisecond).Round(100 * time.Millisecond)
	}
	dbName := fmt.Sprintf("demo_scale_churn_%d_%d", os.Getpid(), len(s.rep.churns))
	dbid, _, err := setupDatabase(ctx, admin, dbName)
	if err != nil {
		return err
	}
	defer admin.ExecContext(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+dbName+` WITH (FORCE)`)
	// autovacuum looks at each database once a naptime (1 min by default):
	// with a TTL of seconds it must look as often as it can, or the churn
	// would measure the naptime rather than the table.
	if _, err := admin.ExecContext(ctx, `ALTER SYSTEM SET autovacuum_naptime = '1s'`); err != nil {
		return err
	}
	if _, err := admin.ExecContext(ctx, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	defer func() {
		admin.ExecContext(context.WithoutCancel(ctx), `ALTER SYSTEM RESET autovacuum_naptime`)
		admin.ExecContext(context.WithoutCancel(ctx), `SELECT pg_reload_conf()`)
	}()
	stats := &statsDB{admin: admin, dbid: dbid, pgss: true}
	token := "bench-" + randHex(16)
	lease := min(so.churnTTL, 10*time.Second)
	srv, err := startServer(ctx, "server-churn", []string{bin, "serve"}, tmp, append(serverEnv(pg.URL(dbName), token),
		"IDEMPOTENCY_TTL="+so.churnTTL.String(), "IDEMPOTENCY_LEASE="+lease.String(),
		"SWEEP_INTERVAL="+ch.interval.String(), fmt.Sprintf("SWEEP_BATCH=%d", ch.batch)))
	if err != nil {
		return err
	}
	defer srv.stop()
	cpu := &cpuMeter{serverPids: []int{srv.cmd.Process.Pid}, postmasterPid: s.cpu.postmasterPid}
	db, err := sqlx.Open("postgres", pg.URL(dbName))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	switch {
	case variant == churnDefaults:
		if err := resetAutovacuum(ctx, db); err != nil {
			return err
		}
	case strings.HasPrefix(variant, churnWith):
		if _, err := db.ExecContext(ctx, `ALTER TABLE idempotency_keys SET (`+strings.TrimPrefix(variant, churnWith)+`)`); err != nil {
			return fmt.Errorf("churn %s: %w", variant, err)
		}
	}
	if err := db.GetContext(ctx, pq.Array(&ch.reloptions), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'idempotency_keys'::regclass`); err != nil {
		return err
	}
	if variant == churnDefaults && len(s.rep.churns) > 0 && slices.Equal(ch.reloptions, s.rep.churns[0].reloptions) {
		s.logf("churn %s: skipped, the migrations set no autovacuum settings on the key table", variant)
		return nil
	}

	cl := newClient(srv, nil, nil, nil, nil, token, 64)
	tpl, err := templateKey(ctx, cl, srv)
	if err != nil {
		return err
	}
	ch.prefilled = int(so.churnRate * so.churnTTL.Seconds())
	f := &fill{db: db, seed: randHex(8), tpl: tpl, total: ch.prefilled, ttl: so.churnTTL}
	if err := f.to(ctx, ch.prefilled); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `VACUUM (ANALYZE) idempotency_keys`); err != nil {
		return err
	}
	if _, err := admin.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	s.logf("churn %s: %d keys expiring over %s; %.0f creates/s for %d periods of %s, sweeping every %s in batches of %d; table options %v",
		variant, ch.prefilled, so.churnTTL, so.churnRate, so.churnPeriods, so.churnTTL, ch.interval, ch.batch, ch.reloptions)

	total := time.Duration(so.churnPeriods) * so.churnTTL
	began := time.Now()
	sampleEvery := max(so.churnTTL/12, 200*time.Millisecond) // not the sweep interval: samples must not keep one phase of it
	var (
		mu      sync.Mutex
		judged  bool
		start   cpuTimes
		startSn snapshot
		lr      loadResult
		dropped int
		wg      sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	// The warm-up period runs its creates unrecorded; the judged ones are
	// one open loop whose result is kept.
	wg.Go(func() {
		openLoop(loadCtx, so.churnRate, so.churnTTL, 64, s.churnCreate(cl, srv))
		mu.Lock()
		judged = true
		mu.Unlock()
		if err := stats.resetStatements(ctx); err != nil {
			s.logf("churn: reset pg_stat_statements: %v", err)
		}
		start = cpu.sample()
		startSn, _ = stats.snapshot(ctx)
		res, d := openLoop(loadCtx, so.churnRate, total-so.churnTTL, 64, s.churnCreate(cl, srv))
		mu.Lock()
		lr, dropped = res, d
		mu.Unlock()
	})
	firstJudged := -1 // the first sample of the judged periods
	for ctx.Err() == nil {
		sn, err := sampleChurn(ctx, db)
		if err != nil {
			return err
		}
		sn.at = time.Since(began)
		ch.samples = append(ch.samples, sn)
		mu.Lock()
		j := judged
		mu.Unlock()
		if j && firstJudged < 0 {
			firstJudged = len(ch.samples) - 1
		}
		if len(ch.samples)%5 == 0 {
			s.logf("churn %s %5.1fs: %d keys (%d expired, not yet swept), table %s + indexes %s, dead %d, autovacuums %d",
				variant, sn.at.Seconds(), sn.keys, sn.expired, mib(sn.heap), mib(sn.indexes), sn.dead, sn.autovacuums)
		}
		if sn.at >= total {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(sampleEvery):
		}
	}
	stopLoad()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	end := cpu.sample()
	endSn, err := stats.snapshot(ctx)
	if err != nil {
		return err
	}
	ch.load, ch.dropped = lr, dropped
	ch.judged = lr.elapsed
	ch.cpu = end.sub(start)
	ch.walBytes = endSn.walBytes - startSn.walBytes
	// The sweep's statement returns a summary row, not the rows it deleted:
	// those are the table's deletes (n_tup_del) over the judged samples.
	if err := stats.admin.QueryRowxContext(ctx, `
SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)
FROM pg_stat_statements WHERE dbid = $1 AND query LIKE '%DELETE FROM idempotency_keys%'`, dbid).Scan(
		&ch.sweepCalls, &ch.sweepExec); err != nil {
		return err
	}
	if firstJudged >= 0 {
		first, last := ch.samples[firstJudged], ch.samples[len(ch.samples)-1]
		ch.autovacuums = last.autovacuums - first.autovacuums
		ch.deletes = last.deletes - first.deletes
	}
	s.logf("churn %s: %d creates (%.0f/s, %d dropped, %d errors %s), p99 %s; the sweeper deleted %d rows in %d statements, %.0f rows per second of its statements; %d autovacuums; WAL %.0f B per create",
		variant, lr.n, lr.rps(), dropped, lr.errors, lr.firstErr, ms(lr.quantile(.99)), ch.deletes, ch.sweepCalls, ch.sweepCapacity(), ch.autovacuums, ch.walPerCreate())
	s.notePeakDisk(ctx, admin)
	s.rep.churns = append(s.rep.churns, ch)
	return nil
}

func (c *churnRun) sweepCapacity() float64 {
	if c.sweepExec <= 0 {
		return 0
	}
	return float64(c.deletes) / (c.sweepExec / 1000)
}

func (c *churnRun) walPerCreate() float64 {
	return float64(c.walBytes) / float64(max(c.load.n, 1))
}

// churnCreate is a create with a fresh key on srv.
func (s *scaleRun) churnCreate(cl *client, srv *serverProc) request {
	return func(ctx context.Context, w, i int) (reply, bool) {
		r := cl.post(ctx, srv, uuid.NewString(), 0, createBody)
		return r, r.err == nil && r.status == http.StatusCreated && !r.replayed
	}
}

// resetAutovacuum resets every autovacuum storage parameter of the key
// table to PostgreSQL's defaults.
func resetAutovacuum(ctx context.Context, db *sqlx.DB) error {
	var opts []string
	if err := db.GetContext(ctx, pq.Array(&opts), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'idempotency_keys'::regclass`); err != nil {
		return err
	}
	var names []string
	for _, o := range opts {
		if name, _, _ := strings.Cut(o, "="); strings.HasPrefix(name, "autovacuum_") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	_, err := db.ExecContext(ctx, `ALTER TABLE idempotency_keys RESET (`+strings.Join(names, ", ")+`)`)
	return err
}

// sampleChurn reads the key table's sizes, counters and rows.
func sampleChurn(ctx context.Context, db *sqlx.DB) (churnSample, error) {
	var c churnSample
	err := db.QueryRowxContext(ctx, `
SELECT pg_table_size('idempotency_keys'), pg_indexes_size('idempotency_keys'),
       n_live_tup, n_dead_tup, autovacuum_count, n_tup_del,
       (SELECT count(*) FROM idempotency_keys),
       (SELECT count(*) FROM idempotency_keys WHERE lease_until IS NULL AND expires_at <= now())
FROM pg_stat_user_tables WHERE relid = 'idempotency_keys'::regclass`).Scan(
		&c.heap, &c.indexes, &c.live, &c.dead, &c.autovacuums, &c.deletes, &c.keys, &c.expired)
	return c, err
}

// openLoop sends requests at rate per second for d, each from one of
// workers senders; its latencies count from when each request was due, so
// a server that falls behind shows in them. A request due while every
// sender is busy and the queue is full is not sent: dropped counts those.
func openLoop(ctx context.Context, rate float64, d time.Duration, workers int, req request) (loadResult, int) {
	due := make(chan time.Time, workers*4)
	results := make([]loadResult, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			res := loadResult{}
			i := 0
			for at := range due {
				r, ok := req(ctx, w, i)
				i++
				if ctx.Err() != nil {
					break
				}
				res.latencies = append(res.latencies, time.Since(at))
				if !ok {
					res.errors++
					if res.firstErr == "" {
						res.firstErr = describe(r)
					}
				}
			}
			results[w] = res
		})
	}
	start := time.Now()
	dropped := 0
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if at.Sub(start) >= d {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(at)):
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case due <- at:
		default:
			dropped++
		}
	}
	close(due)
	wg.Wait()
	out := loadResult{elapsed: time.Since(start)}
	for _, r := range results {
		out.latencies = append(out.latencies, r.latencies...)
		out.errors += r.errors
		if out.firstErr == "" {
			out.firstErr = r.firstErr
		}
	}
	out.n = len(out.latencies)
	slices.Sort(out.latencies)
	return out, dropped
}
