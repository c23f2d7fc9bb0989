package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestScaleFill fills a migrated key table to a number of keys in
// several statements: every row is there under the key scaleKey names, a
// version 4 UUID, with the stored answer of the key it copies, and none
// expired yet, the oldest first to expire.
func TestScaleFill(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := t.Context()
	tpl := keyTemplate{actor: "bench", operation: "demo-requests.create", key: "the-real-one"}
	if _, err := db.ExecContext(ctx, `
INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until,
    status_code, response_body, response_headers, result_id, created_at, completed_at, expires_at)
VALUES ($1, $2, $3, 'f1', 'completed', gen_random_uuid(), NULL, 201, '{"requestId":"r1"}', '{"Location":"/v1/demo-requests/r1"}', 'r1',
    now(), now(), now() + interval '24 hours')`, tpl.actor, tpl.operation, tpl.key); err != nil {
		t.Fatal(err)
	}
	const n = 2500
	var progress []int
	// One statement at a time, so that the pages' order below is exact.
	f := &fill{db: db, seed: "s1", tpl: tpl, total: 10_000, ttl: 24 * time.Hour, margin: time.Hour, chunk: 1000, parallel: 1,
		progress: func(rows int, _ time.Duration) { progress = append(progress, rows) }}
	if err := f.to(ctx, 1200); err != nil {
		t.Fatal(err)
	}
	if err := f.to(ctx, n); err != nil {
		t.Fatal(err)
	}
	if len(progress) != 4 || progress[1] != 1200 || progress[3] != 2500 {
		t.Errorf("progress %v, want a line per statement of at most 1000 rows, ending at 1200 and 2500", progress)
	}
	var got struct {
		Rows, Keys, Copies, Expired int
		Oldest                      time.Duration
	}
	if err := db.QueryRowxContext(ctx, `
SELECT count(*) AS rows, count(DISTINCT idem_key) AS keys,
       count(*) FILTER (WHERE fingerprint = 'f1' AND status_code = 201 AND response_body = '{"requestId":"r1"}'
                          AND lease_until IS NULL AND state = 'completed') AS copies,
       count(*) FILTER (WHERE expires_at <= now()) AS expired,
       (extract(epoch FROM min(expires_at) - now()) * 1e9)::bigint AS oldest
FROM idempotency_keys WHERE idem_key <> $1`, tpl.key).StructScan(&got); err != nil {
		t.Fatal(err)
	}
	if got.Rows != n || got.Keys != n || got.Copies != n || got.Expired != 0 {
		t.Errorf("filled %+v, want %d distinct copies of the key, none expired", got, n)
	}
	if got.Oldest < 59*time.Minute || got.Oldest > 61*time.Minute {
		t.Errorf("the first row expires in %s, want the margin, 1h", got.Oldest)
	}
	for _, i := range []int{0, 1199, 1200, n - 1} {
		key := scaleKey(f.seed, i)
		if u, err := uuid.Parse(key); err != nil || u.Version() != 4 || u.String() != key {
			t.Errorf("scaleKey(%d) = %q: not a version 4 UUID in its canonical form (%v)", i, key, err)
		}
		var found int
		if err := db.GetContext(ctx, &found, `SELECT count(*) FROM idempotency_keys WHERE actor_id = $1 AND operation = $2 AND idem_key = $3`,
			tpl.actor, tpl.operation, key); err != nil || found != 1 {
			t.Errorf("row %d under scaleKey %q: found %d (%v), want 1", i, key, found, err)
		}
	}
	// Each page holds its rows in the order they were created, as a real
	// table does: the sweeper deletes the oldest page after page.
	var outOfOrder int
	if err := db.GetContext(ctx, &outOfOrder, `
SELECT count(*) FROM (
    SELECT created_at < lag(created_at) OVER (PARTITION BY (ctid::text::point)[0] ORDER BY ctid) AS back
    FROM idempotency_keys WHERE idem_key <> $1
) AS r WHERE back`, tpl.key); err != nil || outOfOrder != 0 {
		t.Errorf("%d rows were created before the row ahead of them in their page (%v), want none", outOfOrder, err)
	}
	f.swept = 1500
	if got := f.replayable(); got != 2200 {
		t.Errorf("with the oldest 1500 swept, replays start at row %d, want 2200, the end of the statement where the sweep stopped", got)
	}
	var missing int
	if err := db.GetContext(ctx, &missing, `SELECT count(*) FROM idempotency_keys WHERE idem_key = $1`, scaleKey(f.seed, n)); err != nil || missing != 0 {
		t.Errorf("row %d, past the fill, found %d times (%v)", n, missing, err)
	}
}

// sampleScaleReport has two levels where a create at the larger costs
// twice as much as on the empty table, and a churn whose table grows.
func sampleScaleReport() *scaleReport {
	r := &scaleReport{
		opts: options{rounds: 2, duration: time.Second, warmup: 250 * time.Millisecond},
		so: scaleOptions{levels: []int{0, 10_000_000}, ttl: 24 * time.Hour, churnRate: 500, churnTTL: 30 * time.Second,
			churnPeriods: 6},
		command: "make bench-scale", started: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), elapsed: 15 * time.Minute,
		env:         environment{GoVersion: "go1.26", OS: "Linux", CPUs: 2, MemBytes: 8 << 30, PGVersion: "PostgreSQL 15", Code: "commit abc"},
		diskNeed:    10 << 30,
		diskUsed:    8 << 30,
		pgstattuple: true,
	}
	lat := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	for li, keys := range []int{0, 10_000_000} {
		lv := levelRun{keys: keys, filled: keys, fillTook: time.Minute, table: tableStats{rows: int64(keys) + 1000, heap: 5 << 30, indexes: 1 << 30, pkey: 800 << 20, pkeyLevels: 4, pkeyLeafDensity: 70}}
		for round := 1; round <= 2; round++ {
			for _, c := range levelConcurrencies {
				for _, sc := range levelScenarios {
					cpu := 500 * time.Millisecond
					if sc == scCreate && li == 1 {
						cpu *= 2 // a create at 10 M costs twice as much
					}
					lv.phases = append(lv.phases, levelPhase{
						phase:  phase{round: round, scenario: sc, conc: c, load: loadResult{n: 1000, elapsed: time.Second, latencies: lat}, cpu: cpuTimes{postgres: cpu}},
						blocks: blockCounts{hit: 8000, read: 1000 * int64(li)}})
					lv.beside = append(lv.beside, levelPhase{ // the empty table in the same round
						phase:  phase{round: round, scenario: sc, conc: c, load: loadResult{n: 1000, elapsed: time.Second, latencies: lat}, cpu: cpuTimes{postgres: 500 * time.Millisecond}},
						blocks: blockCounts{hit: 8000}})
				}
			}
		}
		if keys > 0 {
			lv.sweep = levelSweep{rows: 100_000, statements: 201, batch: 500, sweepTook: 20 * time.Second, vacTook: 5 * time.Second,
				sweepWAL: 70_000_000, vacWAL: 1_000_000, sweepCPU: cpuTimes{postgres: 15 * time.Second}}
		}
		r.levels = append(r.levels, lv)
	}
	ch := &churnRun{variant: churnMigrated, rate: 500, ttl: 30 * time.Second, periods: 6, interval: 2 * time.Second, batch: 500,
		load: loadResult{n: 75000, elapsed: 150 * time.Second, latencies: lat}, judged: 150 * time.Second,
		sweepCalls: 400, sweepExec: 3000, autovacuums: 20, deletes: 75000, walBytes: 150_000_000}
	for i := range 19 {
		size := int64(10<<20) + int64(i)*(1<<20) // grows a MiB every 10 s
		ch.samples = append(ch.samples, churnSample{at: time.Duration(i) * 10 * time.Second, heap: size, indexes: 3 << 20, live: 15000, dead: 2000, keys: 15000})
	}
	r.churns = append(r.churns, ch)
	return r
}

// TestScaleReportRenders renders a report whose create target at the
// largest level is missed and whose table grows over the churn: those rows
// say MISSED, the replay and the sweeper's say met, and the chart is SVG.
func TestScaleReportRenders(t *testing.T) {
	r := sampleScaleReport()
	md, err := r.markdown()
	if err != nil {
		t.Fatal(err)
	}
	row := func(prefix string) string {
		for _, line := range strings.Split(md, "\n") {
			if strings.HasPrefix(line, "| "+prefix) {
				return line
			}
		}
		t.Fatalf("no row %q in:\n%s", prefix, md)
		return ""
	}
	for prefix, want := range map[string]string{
		"create at 10 M keys / on the empty table in the same rounds, by CPU per request at 8 clients":  "| 2.00× (rounds 2.00–2.00: 2.00, 2.00) | ≤ 1.30× | **MISSED** |",
		"create at 10 M keys / on the empty table in the same rounds, by CPU per request at 32 clients": "**MISSED** |",
		"replay at 10 M keys / on the empty table in the same rounds, by CPU per request at 8 clients":  "| 1.00× (rounds 1.00–1.00: 1.00, 1.00) | ≤ 1.30× | met |",
		"churn: the sweeper's deletes per second of its statements / the create rate":                   "| 25000 / 500 = 50.0× (75000 rows deleted in 400 statements, 3000 ms) | ≥ 2× | met |",
		"churn: table + indexes over 5 TTL periods":                                                     "| 16.0 MiB: +0% … +94% | within ±15% | **MISSED** |",
	} {
		if got := row(prefix); !strings.HasSuffix(got, want) {
			t.Errorf("row:\n%s\nwant it to end in:\n%s", got, want)
		}
	}
	if !strings.Contains(md, "| 10 M | 100000 | 201 of 500 | 20s | **5000** | 150 | 700 | 5s |") {
		t.Errorf("no sweep row for 10 M keys:\n%s", md)
	}
	if !strings.Contains(md, "| 10 M | create | 8 | **1000** |") {
		t.Errorf("no level row for the create at 10 M costing 1000 µs:\n%s", md)
	}
	if !strings.Contains(md, "- create at 8 clients, 0 → 10 M keys: PostgreSQL's CPU per request 500 → 1000 µs, the server's 0 → 0 µs; blocks hit 8.0 → 8.0, read from the operating system 0.00 → 1.00") {
		t.Errorf("no line saying what the missed create did differently:\n%s", md)
	}
	_, misses := r.verdict()
	if len(misses) != 3 {
		t.Errorf("misses %q, want the two creates and the size", misses)
	}
	svg, err := r.sizeSVG()
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil || !bytes.Contains(svg, []byte("dead tuples")) {
		t.Errorf("the chart is not an SVG with its legend (%v): %.200s", err, svg)
	}
}

// TestOpenLoopKeepsItsRate sends at a fixed rate to a request slower than
// the interval: the senders overlap, so every request due is sent, and the
// latencies count from when each was due.
func TestOpenLoopKeepsItsRate(t *testing.T) {
	lr, dropped := openLoop(t.Context(), 200, 500*time.Millisecond, 8, func(ctx context.Context, w, i int) (reply, bool) {
		time.Sleep(20 * time.Millisecond)
		return reply{}, true
	})
	if lr.n != 100 || dropped != 0 || lr.errors != 0 {
		t.Errorf("sent %d, dropped %d, errors %d; want the 100 due in 0.5 s at 200/s", lr.n, dropped, lr.errors)
	}
	if lr.quantile(0) < 20*time.Millisecond {
		t.Errorf("fastest latency %s, below the request's own 20ms", lr.quantile(0))
	}
}
