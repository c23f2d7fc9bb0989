package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/demo-api/demo-api/internal/postgres"
)

// drainRun is what the drain measured: a backlog of rows due at once, handed
// to the review desk by the dispatcher of demo-api serve.
type drainRun struct {
	rows                     int
	took                     time.Duration
	submitted, submissions   int // outbox rows submitted; the desk's submissions
	submitCalls, statusCalls int
	// CPU time per delivery of the dispatcher (serve), the desk, PostgreSQL
	// and the machine; zero where not measured.
	cpuDispatcher, cpuDesk, cpuPostgres, cpuMachine time.Duration
	// The statements of serve's database (the dispatcher's) and of the
	// desk's during the drain, the bench's own left out.
	statements, deskStatements []statement
}

func (d drainRun) rate() float64 { return float64(d.rows) / d.took.Seconds() }
func (d drainRun) callsPerDelivery() float64 {
	return float64(d.submitCalls+d.statusCalls) / float64(max(d.submitted, 1))
}

// withDesk fills a database of its own with rows due rows (requests and
// their outbox rows, as creates leave them) and the requests the expedite
// phase expedites, starts the review desk (demo-api provider, on a
// database of its own, with credit enough for every expedite) and demo-api
// serve with PROVIDER_URL, then runs the drain (if rows > 0) and the
// expedite's rounds (if expediteRounds > 0) against them.
func (b *bench) withDesk(ctx context.Context, admin *sqlx.DB, pgURL func(string) string, bin, tmp, token string, rows, expediteRounds int) error {
	dbName := fmt.Sprintf("demo_bench_drain_%d", os.Getpid())
	deskName := fmt.Sprintf("demo_bench_desk_%d", os.Getpid())
	for _, name := range []string{dbName, deskName} {
		if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
		defer admin.ExecContext(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
	}
	var dbid, deskDBID int64
	if err := admin.GetContext(ctx, &dbid, `SELECT oid::bigint FROM pg_database WHERE datname = $1`, dbName); err != nil {
		return err
	}
	if err := admin.GetContext(ctx, &deskDBID, `SELECT oid::bigint FROM pg_database WHERE datname = $1`, deskName); err != nil {
		return err
	}
	db, err := postgres.Open(ctx, pgURL(dbName), postgres.LongStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := postgres.Migrate(db, 0); err != nil {
		return err
	}
	// Due in an hour, so that serve's dispatcher finds nothing until the
	// clock starts.
	if _, err := db.ExecContext(ctx, `
INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
SELECT gen_random_uuid(), 'bench', 'accepted', 'bench-drain ' || i, '', now() FROM generate_series(1, $1) i`, rows); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `
INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
SELECT id, actor_id, now() + interval '1 hour', now(), now() FROM demo_requests`); err != nil {
		return err
	}
	if expediteRounds > 0 {
		if _, err := db.ExecContext(ctx, expediteRequestsSQL, expediteRequests); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE outbox`); err != nil {
		return err
	}

	// The desk stands in for another company's service: its durable
	// commits would be paid on its machines, not on this one.
	if _, err := admin.ExecContext(ctx, `ALTER DATABASE `+deskName+` SET synchronous_commit = off`); err != nil {
		return err
	}
	desk, err := startServer(ctx, "desk", []string{bin, "provider"}, tmp, []string{
		"PATH=" + os.Getenv("PATH"), "PROVIDER_DATABASE_URL=" + pgURL(deskName), "PROVIDER_LISTEN_ADDR=127.0.0.1:0", "LOG_FORMAT=json",
		"PROVIDER_CREDIT=1000000000"})
	if err != nil {
		return err
	}
	defer desk.stop()
	srv, err := startServer(ctx, "server-drain", []string{bin, "serve"}, tmp,
		append(serverEnv(pgURL(dbName), token), "PROVIDER_URL="+desk.base))
	if err != nil {
		return err
	}
	defer srv.stop()
	deskDB, err := sqlx.Open("postgres", pgURL(deskName))
	if err != nil {
		return err
	}
	defer deskDB.Close()

	if rows > 0 {
		if err := b.stage("drain", b.drainWait(rows), func() error { return b.drain(ctx, db, deskDB, dbid, deskDBID, srv, desk, rows) }); err != nil {
			return err
		}
	}
	if expediteRounds > 0 {
		return b.stage("expedite", b.expediteWait(expediteRounds), func() error {
			return b.expedite(ctx, db, deskDB, dbid, deskDBID, srv, desk, token, expediteRounds)
		})
	}
	return nil
}

// drain makes every outbox row of db due at once, and times the backlog to
// empty: serve's dispatcher (srv) hands them to desk. The calls to the desk
// are read from serve's metrics.
func (b *bench) drain(ctx context.Context, db, deskDB *sqlx.DB, dbid, deskDBID int64, srv, desk *serverProc, rows int) error {
	b.logf("drain: %d due rows to the review desk", rows)
	if err := b.stats.resetStatements(ctx); err != nil {
		return err
	}

	dispatcherCPU := &cpuMeter{serverPids: []int{srv.cmd.Process.Pid}, postmasterPid: b.cpu.postmasterPid}
	deskCPU := &cpuMeter{serverPids: []int{desk.cmd.Process.Pid}}
	cpu0, deskCPU0 := dispatcherCPU.sample(), deskCPU.sample()
	start := time.Now()
	if _, err := db.ExecContext(ctx, benchsOwn+`UPDATE outbox SET next_attempt_at = now()`); err != nil {
		return err
	}
	for {
		var pending bool // EXISTS stops at the first row: the poll costs next to nothing
		if err := db.GetContext(ctx, &pending, benchsOwn+`SELECT EXISTS (SELECT 1 FROM outbox WHERE next_attempt_at IS NOT NULL)`); err != nil {
			return err
		}
		if !pending {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("drain: rows of %d still pending after 5 minutes", rows)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	d := drainRun{rows: rows, took: time.Since(start)}
	used, deskUsed := dispatcherCPU.sample().sub(cpu0), deskCPU.sample().sub(deskCPU0)
	d.cpuDispatcher, d.cpuDesk = used.server/time.Duration(rows), deskUsed.server/time.Duration(rows)
	d.cpuPostgres, d.cpuMachine = used.postgres/time.Duration(rows), used.machine/time.Duration(rows)
	if err := db.GetContext(ctx, &d.submitted, `SELECT count(*) FROM outbox WHERE state = 'submitted'`); err != nil {
		return err
	}
	if err := deskDB.GetContext(ctx, &d.submissions, `SELECT count(*) FROM submissions`); err != nil {
		return err
	}
	for _, st := range []struct {
		dbid int64
		into *[]statement
	}{{dbid, &d.statements}, {deskDBID, &d.deskStatements}} {
		all, err := (&statsDB{admin: b.stats.admin, dbid: st.dbid, pgss: b.stats.pgss}).statements(ctx)
		if err != nil {
			return err
		}
		for _, s := range all {
			if !strings.HasPrefix(s.Query, benchsOwn) {
				*st.into = append(*st.into, s)
			}
		}
	}
	calls, err := providerCalls(ctx, srv.base+"/metrics")
	if err != nil {
		return err
	}
	d.submitCalls, d.statusCalls = calls["submit"], calls["submit_status"]
	b.rep.drain = &d
	return nil
}

// benchsOwn begins the drain's own statements, which its counts leave out.
const benchsOwn = "-- demo-bench's own\n"

// providerCalls reads serve's count of calls to the desk by kind (submit,
// status) from its metrics.
func providerCalls(ctx context.Context, url string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	calls := map[string]int{}
	for _, m := range families["demo_api_outbox_provider_calls_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "call" {
				calls[l.GetValue()] = int(m.GetCounter().GetValue())
			}
		}
	}
	return calls, nil
}
