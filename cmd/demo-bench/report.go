package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/statusmix"
)

// phase is one measured closed-loop run.
type phase struct {
	round    int
	scenario string
	conc     int
	load     loadResult
	db       phaseCounters
	cpu      cpuTimes
}

func (p phase) perReq(v int64) float64 { return float64(v) / float64(max(p.load.n, 1)) }

type stormRun struct {
	round int
	stormResult
}

// roundTripCount is a scenario run through the counting proxy.
type roundTripCount struct {
	scenario               string
	requests, errors       int
	roundTrips, statements int64
	firstErr               string
	db                     phaseCounters
}

func (r roundTripCount) perReq(v int64) float64 { return float64(v) / float64(max(r.requests, 1)) }

type environment struct {
	goVersion, os, cpuModel, kernel, pgVersion, pgSource string
	code                                                 string
	cpus                                                 int
	memBytes                                             int64
	settings                                             []string
}

// report is everything one run measured.
type report struct {
	opts    options
	command string
	started time.Time
	elapsed time.Duration
	env     environment

	phases []phase
	storms []stormRun
	floor  []floorResult
	counts []roundTripCount

	drain *drainRun

	peakRSS, rssAfter                    int64
	rowsCreate, rowsBaseline, rowsOutbox int
	sentCreate, sentBaseline, sentOutbox int
}

// Targets of the issue.
const (
	targetCreateVsBaseline   = 0.7 // the one-phase create
	targetCreate2PVsBaseline = 0.5 // the two-phase create keeps the target it had
	targetReplayVsCreate     = 2.0
	targetDrainVsCreate      = 1.0 // the dispatcher keeps up with creates at 8 clients
	targetCallsPerDelivery   = 1.0
	targetPeakRSS            = 64 << 20
	targetCreateStatements   = 1 // one phase: one statement
	targetCreateCommits      = 1 // and one commit
	targetCreate2PStatements = 2 // claim, finish
	targetReplayStatements   = 1
)

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cell is the rounds of one scenario at one concurrency.
type cell struct {
	rps, p50, p99 []float64 // per round
	errors, n     int
	firstErr      string
	statuses      statusmix.Mix
}

func cells(phases []phase) map[string]map[int]*cell {
	out := map[string]map[int]*cell{}
	for _, p := range phases {
		if out[p.scenario] == nil {
			out[p.scenario] = map[int]*cell{}
		}
		c := out[p.scenario][p.conc]
		if c == nil {
			c = &cell{statuses: statusmix.Mix{}}
			out[p.scenario][p.conc] = c
		}
		c.rps = append(c.rps, p.load.rps())
		c.p50 = append(c.p50, msf(p.load.quantile(.5)))
		c.p99 = append(c.p99, msf(p.load.quantile(.99)))
		c.errors += p.load.errors
		c.n += p.load.n
		if c.firstErr == "" {
			c.firstErr = p.load.firstErr
		}
		c.statuses.Add(p.load.statuses)
	}
	return out
}

// ratios returns the per-round ratios a/b of req/s at concurrency c.
func ratios(phases []phase, a, b string, c int) []float64 {
	byRound := map[int]map[string]float64{}
	for _, p := range phases {
		if p.conc != c {
			continue
		}
		if byRound[p.round] == nil {
			byRound[p.round] = map[string]float64{}
		}
		byRound[p.round][p.scenario] = p.load.rps()
	}
	var out []float64
	for r := 1; r <= len(byRound); r++ {
		if m := byRound[r]; m != nil && m[b] > 0 {
			out = append(out, m[a]/m[b])
		}
	}
	return out
}

// dbWork sums the database counters of a scenario's phases.
type dbWork struct {
	requests         int64
	calls, xids, wal int64
	byQuery          map[int64]*statement
	queryOrder       []int64
}

func work(phases []phase, sc string) dbWork {
	w := dbWork{byQuery: map[int64]*statement{}}
	for _, p := range phases {
		if p.scenario != sc {
			continue
		}
		w.requests += int64(p.load.n)
		w.calls += p.db.calls
		w.xids += p.db.xids
		w.wal += p.db.walBytes
		for _, st := range p.db.statements {
			// By displayed text: one statement can show under two query ids
			// (pg_stat_statements keeps the text it first saw for each).
			st.QueryID = textID(shortQuery(st.Query, 70))
			if s := w.byQuery[st.QueryID]; s != nil {
				s.Calls += st.Calls
				s.TotalExec += st.TotalExec
				s.MaxExec = max(s.MaxExec, st.MaxExec)
			} else {
				cp := st
				w.byQuery[st.QueryID] = &cp
				w.queryOrder = append(w.queryOrder, st.QueryID)
			}
		}
	}
	return w
}

// textID is a key for a statement's displayed text.
func textID(q string) int64 {
	h := fnv.New64a()
	h.Write([]byte(q))
	return int64(h.Sum64())
}

func (w dbWork) per(v int64) float64 { return float64(v) / float64(max(w.requests, 1)) }

func (r *report) count(sc string) (roundTripCount, bool) {
	for _, c := range r.counts {
		if c.scenario == sc {
			return c, true
		}
	}
	return roundTripCount{}, false
}

func (r *report) floorResult(name string, c int, syncOff bool) (floorResult, bool) {
	for _, f := range r.floor {
		if f.name == name && f.conc == c && f.syncOff == syncOff {
			return f, true
		}
	}
	return floorResult{}, false
}

// target is one line of the targets table.
type target struct {
	name, measured, want string
	met, hard            bool
}

func (r *report) targets() []target {
	var ts []target
	cs := cells(r.phases)
	cb := median(ratios(r.phases, scCreate, scBaseline, 8))
	ts = append(ts, target{name: "create (one phase) / baseline at 8 clients", measured: fmt.Sprintf("%.2f×", cb),
		want: fmt.Sprintf("≥ %.1f×", targetCreateVsBaseline), met: cb >= targetCreateVsBaseline})
	c2b := median(ratios(r.phases, scCreate2P, scBaseline, 8))
	ts = append(ts, target{name: "create-2p (two phases) / baseline at 8 clients", measured: fmt.Sprintf("%.2f×", c2b),
		want: fmt.Sprintf("≥ %.1f×", targetCreate2PVsBaseline), met: c2b >= targetCreate2PVsBaseline})
	for _, c := range concurrencies {
		rc := median(ratios(r.phases, scReplay, scCreate, c))
		ts = append(ts, target{name: fmt.Sprintf("replay / create at %d client%s", c, plural(c)), measured: fmt.Sprintf("%.2f×", rc),
			want: fmt.Sprintf("≥ %.1f×", targetReplayVsCreate), met: rc >= targetReplayVsCreate})
	}
	if d := r.drain; d != nil {
		create := 0.0
		if x := cs[scCreate][8]; x != nil {
			create = median(x.rps)
		}
		ts = append(ts, target{name: fmt.Sprintf("drain: deliveries/s of a %d-row backlog / creates/s at 8 clients", d.rows),
			measured: fmt.Sprintf("%.0f / %.0f = %.2f×", d.rate(), create, d.rate()/max(create, 1)),
			want:     fmt.Sprintf("≥ %.1f×", targetDrainVsCreate), met: d.rate() >= targetDrainVsCreate*create})
		ts = append(ts, target{name: "drain: desk calls per delivery", measured: fmt.Sprintf("%.2f", d.callsPerDelivery()),
			want: fmt.Sprintf("%.1f", targetCallsPerDelivery), met: d.callsPerDelivery() <= targetCallsPerDelivery+0.0001})
		ts = append(ts, target{name: "drain: rows submitted, and the desk's submissions, each once",
			measured: fmt.Sprintf("%d, %d of %d", d.submitted, d.submissions, d.rows), want: "all",
			met: d.submitted == d.rows && d.submissions == d.rows, hard: true})
	}
	badRows, fivexx, other := 0, 0, 0
	for _, s := range r.storms {
		if s.rows != 1 {
			badRows++
		}
		fivexx += s.s5xx
		other += s.other
	}
	ts = append(ts, target{name: fmt.Sprintf("storms: business rows per key (%d storms)", len(r.storms)),
		measured: stormRowsSummary(r.storms), want: "exactly 1 each", met: badRows == 0 && len(r.storms) > 0, hard: true})
	ts = append(ts, target{name: "storms: 5xx responses", measured: fmt.Sprint(fivexx), want: "0", met: fivexx == 0, hard: true})
	ts = append(ts, target{name: "storms: transport errors or unexpected statuses", measured: fmt.Sprint(other), want: "0", met: other == 0, hard: true})
	if cpuMeasured {
		ts = append(ts, target{name: "server peak RSS (VmHWM)", measured: mib(r.peakRSS), want: "≤ 64 MiB", met: r.peakRSS <= targetPeakRSS})
	} else {
		ts = append(ts, target{name: "server peak RSS", measured: notMeasured})
	}
	cw, c2w, rw := work(r.phases, scCreate), work(r.phases, scCreate2P), work(r.phases, scReplay)
	if r.opts.rounds > 0 && cw.calls > 0 {
		ts = append(ts, target{name: "SQL round trips (statements) per create (one phase)", measured: fmt.Sprintf("%.2f", cw.per(cw.calls)),
			want: fmt.Sprintf("≤ %d", targetCreateStatements), met: cw.per(cw.calls) <= targetCreateStatements+0.005})
		ts = append(ts, target{name: "commits (transactions with an xid) per create (one phase)", measured: fmt.Sprintf("%.2f", cw.per(cw.xids)),
			want: fmt.Sprintf("≤ %d", targetCreateCommits), met: cw.per(cw.xids) <= targetCreateCommits+0.01})
		ts = append(ts, target{name: "SQL round trips (statements) per create-2p", measured: fmt.Sprintf("%.2f", c2w.per(c2w.calls)),
			want: fmt.Sprintf("≤ %d", targetCreate2PStatements), met: c2w.per(c2w.calls) <= targetCreate2PStatements+0.005})
		ts = append(ts, target{name: "SQL round trips (statements) per replay", measured: fmt.Sprintf("%.2f", rw.per(rw.calls)),
			want: fmt.Sprintf("≤ %d", targetReplayStatements), met: rw.per(rw.calls) <= targetReplayStatements+0.005})
	} else {
		ts = append(ts, target{name: "SQL round trips per create / replay", measured: "not counted (no pg_stat_statements)", want: "≤ 2 / ≤ 1"})
	}
	errs := 0
	for _, byConc := range cs {
		for _, c := range byConc {
			errs += c.errors
		}
	}
	ts = append(ts, target{name: "errors in the baseline/create/replay phases", measured: fmt.Sprint(errs), want: "0", met: errs == 0, hard: true})
	rowsOK := r.rowsCreate == r.sentCreate && r.rowsBaseline == r.sentBaseline && r.rowsOutbox == r.sentOutbox
	ts = append(ts, target{name: "business rows = 201s (create, baseline, baseline+outbox)",
		measured: fmt.Sprintf("%d = %d, %d = %d, %d = %d", r.rowsCreate, r.sentCreate, r.rowsBaseline, r.sentBaseline, r.rowsOutbox, r.sentOutbox),
		want:     "equal", met: rowsOK, hard: true})
	return ts
}

func stormRowsSummary(storms []stormRun) string {
	m := map[int]int{}
	for _, s := range storms {
		m[s.rows]++
	}
	var parts []string
	for _, rows := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d row%s: %d storm%s", rows, plural(rows), m[rows], plural(m[rows])))
	}
	return strings.Join(parts, "; ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// verdict returns the failed hard checks and the missed performance targets.
func (r *report) verdict() (failures, misses []string) {
	for _, t := range r.targets() {
		if t.met || t.want == "" {
			continue
		}
		line := fmt.Sprintf("%s: %s (target %s)", t.name, t.measured, t.want)
		if t.hard {
			failures = append(failures, line)
		} else {
			misses = append(misses, line)
		}
	}
	return failures, misses
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func joinf(v []float64, format string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}

const (
	beginMarker = "<!-- demo-bench:begin (written by make bench; edit outside the markers) -->"
	endMarker   = "<!-- demo-bench:end -->"
)

// markdown renders the report.
func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e := r.env
	p("## Latest run\n\n")
	p("Command: %s, %s, %s in all.\n\n", r.command, r.started.UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second))
	p("- Code: %s.\n", e.code)
	p("- Machine: %d CPUs (%s), %.1f GiB RAM, %s %s; %s.\n", e.cpus, e.cpuModel, float64(e.memBytes)/(1<<30), e.os, e.kernel, e.goVersion)
	p("- PostgreSQL: %s, %s, **durable** (%s), pg_stat_statements preloaded. The server is the real `demo-api serve` binary "+
		"(LOG_FORMAT=json to a file, its pool of 32 connections, SWEEP_INTERVAL=1h so no sweep runs during a phase), on 127.0.0.1; "+
		"`create` is a create as the service runs it (the one-phase path), `create-2p` the same create sent to a second server started with IDEMPOTENCY_PATH=two_phase (claim, then finish). "+
		"The baseline is a server of its own, demo-bench started again as `demo-bench %s`: the same chi middleware in the same order "+
		"(request id, JSON request log and latency histogram, panic recovery, bearer authentication), the same body rules and "+
		"demo.CreateInput.Validate, postgres.Open's connection settings, one prepared INSERT, and the same 201 answer, without the idempotency layer. "+
		"`baseline+outbox` is a second one, started with BASELINE_OUTBOX=true, whose one prepared statement also writes the request's outbox row: the create's whole business effect, without the layer.\n",
		e.pgVersion, e.pgSource, strings.Join(e.settings, ", "), baselineCommand)
	p("- Load: closed loop, each client sends its next request when the last one answered (Go net/http, keep-alive). "+
		"%d rounds; in each, for 1, 8 and 32 clients: baseline, baseline+outbox, create, create-2p, replay (order rotated each round), %s each after a %s warm-up; "+
		"then %d storms of %d requests on one fresh key (one-phase create). Figures are medians across rounds; ratios are medians of the per-round ratios.\n\n",
		r.opts.rounds, r.opts.duration, r.opts.warmup, r.opts.storms, r.opts.stormSize)

	p("### Targets\n\n| target | measured | wanted | result |\n|---|---|---|---|\n")
	for _, t := range r.targets() {
		res := "met"
		switch {
		case t.want == "":
			res = "n/a"
		case !t.met && t.hard:
			res = "**FAILED**"
		case !t.met:
			res = "**MISSED**"
		}
		p("| %s | %s | %s | %s |\n", t.name, t.measured, t.want, res)
	}
	p("\n")

	cs := cells(r.phases)
	p("### Throughput and latency\n\n| scenario | clients | req/s | p50 | p99 | errors | req/s per round |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, sc := range scenarios {
		for _, c := range concurrencies {
			x := cs[sc][c]
			if x == nil {
				continue
			}
			p("| %s | %d | %.0f | %.2f ms | %.2f ms | %d | %s |\n", sc, c, median(x.rps), median(x.p50), median(x.p99), x.errors, joinf(x.rps, "%.0f"))
		}
	}
	p("\n")
	for _, sc := range scenarios {
		for _, c := range concurrencies {
			if x := cs[sc][c]; x != nil && x.errors > 0 {
				p("- %s @%d: %d errors, first: %s; statuses: %s\n", sc, c, x.errors, x.firstErr, x.statuses)
			}
		}
	}

	if d := r.drain; d != nil {
		p("### The outbox drained\n\n%d requests with their outbox rows, all due at once, in a database of their own; `demo-api serve` with "+
			"PROVIDER_URL (its dispatcher: 4 rounds at once of up to 32 rows each) hands them to `demo-api provider`, the review desk, on a database "+
			"of its own on the same PostgreSQL. Timed from the rows becoming due to the backlog's end; the calls are serve's own count.\n\n"+
			"| rows | took | deliveries/s | submit calls | status calls | calls per delivery | submitted | the desk's submissions |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n"+
			"| %d | %s | **%.0f** | %d | %d | %.2f | %d | %d |\n\n",
			d.rows, d.rows, d.took.Round(time.Millisecond), d.rate(), d.submitCalls, d.statusCalls, d.callsPerDelivery(), d.submitted, d.submissions)
		if cpuMeasured {
			p("CPU per delivery: dispatcher (serve) %.3f ms, review desk %.3f ms, PostgreSQL %.3f ms; the whole machine %.3f ms.\n\n",
				msf(d.cpuDispatcher), msf(d.cpuDesk), msf(d.cpuPostgres), msf(d.cpuMachine))
		}
	}

	p("### Ratios\n\n| clients | create / baseline | create-2p / baseline | replay / create | replay / baseline | create / baseline+outbox | baseline+outbox / baseline |\n|---:|---|---|---|---|---|---|\n")
	for _, c := range concurrencies {
		cb, c2b := ratios(r.phases, scCreate, scBaseline, c), ratios(r.phases, scCreate2P, scBaseline, c)
		rc, rb := ratios(r.phases, scReplay, scCreate, c), ratios(r.phases, scReplay, scBaseline, c)
		co, ob := ratios(r.phases, scCreate, scOutbox, c), ratios(r.phases, scOutbox, scBaseline, c)
		p("| %d | **%.2f×** (%s) | **%.2f×** (%s) | **%.2f×** (%s) | %.2f× | %.2f× (%s) | %.2f× |\n", c, median(cb), joinf(cb, "%.2f"), median(c2b), joinf(c2b, "%.2f"),
			median(rc), joinf(rc, "%.2f"), median(rb), median(co), joinf(co, "%.2f"), median(ob))
	}
	p("\nbaseline+outbox is the baseline server writing the create's whole business effect, the request and its outbox row in one statement, " +
		"without the idempotency layer: create / baseline+outbox is what the layer itself costs, the outbox apart.\n")
	p("\n")

	p("### Database work per request\n\n")
	p("| scenario | SQL statements (round trips) | network round trips | transactions with an xid (commits that write WAL) | WAL bytes |\n|---|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		w := work(r.phases, sc)
		nrt := "–"
		if c, ok := r.count(sc); ok {
			nrt = fmt.Sprintf("%.2f", c.perReq(c.roundTrips))
			if c.errors > 0 {
				nrt += fmt.Sprintf(" (%d errors: %s)", c.errors, c.firstErr)
			}
		}
		p("| %s | %.2f | %s | %.2f | %.0f |\n", sc, w.per(w.calls), nrt, w.per(w.xids), w.per(w.wal))
	}
	p("\nStatements are counted with pg_stat_statements over every measured phase (the app's database only); network round trips by a proxy that counts the "+
		"protocol's Sync and Query messages (%d sequential requests per scenario, through a second server with the same DATABASE_URL but for the proxy's port); transactions with an xid from the transaction-id counter "+
		"(a transaction that wrote or locked a row: its commit writes WAL and, unless asynchronous, waits for its flush); WAL bytes from the insert position (both include autovacuum, a few per mille).\n\n", r.opts.countRequests)
	p("| scenario | statement | calls per request | mean execution under load | at 1 client: mean planning | at 1 client: mean (max) execution |\n|---|---|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		w := work(r.phases, sc)
		seq := map[int64]statement{}
		if c, ok := r.count(sc); ok {
			for _, st := range c.db.statements {
				id := textID(shortQuery(st.Query, 70))
				if prev, ok := seq[id]; ok {
					st.Calls += prev.Calls
					st.TotalPlan += prev.TotalPlan
					st.TotalExec += prev.TotalExec
					st.MaxExec = max(st.MaxExec, prev.MaxExec)
				}
				seq[id] = st
			}
		}
		for _, id := range w.queryOrder {
			st := w.byQuery[id]
			if w.per(st.Calls) < 0.01 {
				continue
			}
			plan, exec := "–", "–"
			if one, ok := seq[id]; ok && one.Calls > 0 {
				plan = fmt.Sprintf("%.3f ms", one.TotalPlan/float64(one.Calls))
				exec = fmt.Sprintf("%.3f ms (%.3f ms)", one.TotalExec/float64(one.Calls), one.MaxExec)
			}
			p("| %s | `%s` | %.2f | %.3f ms | %s | %s |\n", sc, shortQuery(st.Query, 70), w.per(st.Calls), st.TotalExec/float64(max(st.Calls, 1)), plan, exec)
		}
	}
	p("\n")

	r.cpuSection(p)

	p("### Same-key storms\n\n")
	var first, replayed, conflict, s5xx, other int
	for _, s := range r.storms {
		first, replayed, conflict, s5xx, other = first+s.first, replayed+s.replayed, conflict+s.conflict, s5xx+s.s5xx, other+s.other
	}
	p("%d storms of %d concurrent requests, each on one fresh key with one body. Business rows per key: %s. "+
		"Status mix over all storms: 201 first %d, 201 replayed %d, 409 %d, 5xx %d, other %d.\n\n",
		len(r.storms), r.opts.stormSize, stormRowsSummary(r.storms), first, replayed, conflict, s5xx, other)
	p("| round | 201 first | 201 replayed | 409 in progress | 5xx | other | business rows | wall time | p50 | p99 |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.storms {
		p("| %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", s.round, s.first, s.replayed, s.conflict, s.s5xx, s.other, s.rows, ms(s.elapsed), ms(s.p50), ms(s.p99))
		if s.firstOther != "" {
			p("| | first unexpected: %s | | | | | | | | |\n", s.firstOther)
		}
	}
	p("\n")

	if cpuMeasured {
		p("### Server memory\n\nPeak RSS of the demo-api process (VmHWM, after all phases and storms): **%s**; RSS at that point: %s.\n\n", mib(r.peakRSS), mib(r.rssAfter))
	} else {
		p("### Server memory\n\n%s.\n\n", notMeasured)
	}

	p("### SQL floor\n\nThe store's statements straight from Go (postgres.Open and postgres.Store, as the server uses them), no HTTP, %s per line:\n\n", r.opts.floorDuration)
	p("| work | clients | synchronous_commit | ops/s | p50 | p99 | errors |\n|---|---:|---|---:|---:|---:|---:|\n")
	for _, f := range r.floor {
		sc := "on"
		if f.syncOff {
			sc = "off"
		}
		errs := fmt.Sprint(f.errors)
		if f.errors > 0 {
			errs += " (" + f.firstErr + ")"
		}
		p("| %s | %d | %s | %.0f | %s | %s | %s |\n", f.name, f.conc, sc, f.rps, ms(f.p50), ms(f.p99), errs)
	}
	claim, ok1 := r.floorResult("claim (new key)", 1, false)
	cf, ok2 := r.floorResult("claim + finish", 1, false)
	ins, ok3 := r.floorResult("plain insert", 1, false)
	claimOff, ok4 := r.floorResult("claim (new key)", 1, true)
	if ok1 && ok2 && ok3 && ok4 {
		p("\nAt 1 client (p50) the claim alone takes %s (%s with synchronous_commit=off for the session), "+
			"a create's SQL (claim, then finish) %s, the baseline's INSERT %s: a create's SQL floor is %.2f× the baseline's at 1 client",
			ms(claim.p50), ms(claimOff.p50), ms(cf.p50), ms(ins.p50), msf(cf.p50)/msf(ins.p50))
		if cf8, ok := r.floorResult("claim + finish", 8, false); ok {
			if ins8, ok := r.floorResult("plain insert", 8, false); ok && cf8.rps > 0 {
				p(" and %.2f× at 8 (%.0f against %.0f per second)", ins8.rps/cf8.rps, cf8.rps, ins8.rps)
			}
		}
		p(".\n")
	}
	p("\n")

	return b.String()
}

// writeSection puts md between the markers of the file at path, keeping
// what is outside them; a missing file is created.
func writeSection(path, md string) error {
	section := beginMarker + "\n\n" + md + endMarker + "\n"
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		old = []byte("# Benchmarks\n\n" + beginMarker + "\n" + endMarker + "\n")
	case err != nil:
		return err
	}
	i := bytes.Index(old, []byte(beginMarker))
	j := bytes.Index(old, []byte(endMarker))
	var out []byte
	if i < 0 || j < i {
		out = append(append(old, '\n'), section...)
	} else {
		k := j + len(endMarker)
		if k < len(old) && old[k] == '\n' {
			k++
		}
		out = append(append(append([]byte{}, old[:i]...), section...), old[k:]...)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// cpuSection renders the CPU per request, where this OS lets it be measured.
func (r *report) cpuSection(p func(format string, args ...any)) {
	if !cpuMeasured {
		p("### CPU per request\n\n%s.\n\n", notMeasured)
		return
	}
	p("### CPU per request\n\nCPU time (user + system) during the measured phases, per request, medians across rounds. \"Cores busy\" is the three together per second of wall time; "+
		"\"Servers\" is the two demo-api and the two baseline servers together (those not under load add next to nothing). \"machine busy\" is every process and the kernel (/proc/stat), including whatever else runs on the machine (the machine has %d CPUs).\n\n", r.env.cpus)
	p("| scenario | clients | servers | PostgreSQL | load generator | total | cores busy | machine busy |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		for _, c := range concurrencies {
			var srv, pgc, cli, tot, busy, mach []float64
			for _, ph := range r.phases {
				if ph.scenario != sc || ph.conc != c || ph.load.n == 0 {
					continue
				}
				n := float64(ph.load.n)
				srv = append(srv, msf(ph.cpu.server)/n)
				pgc = append(pgc, msf(ph.cpu.postgres)/n)
				cli = append(cli, msf(ph.cpu.client)/n)
				all := ph.cpu.server + ph.cpu.postgres + ph.cpu.client
				tot = append(tot, msf(all)/n)
				busy = append(busy, all.Seconds()/ph.load.elapsed.Seconds())
				mach = append(mach, ph.cpu.machine.Seconds()/ph.load.elapsed.Seconds())
			}
			if len(tot) == 0 {
				continue
			}
			p("| %s | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms | %.2f | %.2f |\n", sc, c, median(srv), median(pgc), median(cli), median(tot), median(busy), median(mach))
		}
	}
	p("\n")
}
