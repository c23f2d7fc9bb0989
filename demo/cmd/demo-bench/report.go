package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/demo-api/demo-api/demo/internal/tools/statusmix"
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

// environment is where the bench ran. Its fields are exported for the
// report's template.
type environment struct {
	GoVersion, OS, CPUModel, Kernel, PGVersion, PGSource string
	Code                                                 string
	CPUs                                                 int
	MemBytes                                             int64
	Settings                                             []string
}

func (e environment) MemGiB() float64 { return float64(e.MemBytes) / (1 << 30) }

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

	drain    *drainRun
	expedite *expediteRun

	peakRSS, rssAfter                                int64
	rowsCreate, rowsBaseline, rowsOutbox, rowsKeyRow int
	sentCreate, sentBaseline, sentOutbox, sentKeyRow int
}

// The targets. The ratios by CPU per request are
// throughput-equivalent: the reference's CPU per request over the
// scenario's, so higher is better.
const (
	targetCreateVsRows8      = 0.75 // the one-phase create against the rows it writes (baseline+key), at 8 clients
	targetCreateVsRows32     = 0.70 // and at 32, where 32 backends share the host's cores
	targetCreate2PVsCreate   = 0.6  // the two-phase create against the one-phase one, at 8 and 32 clients
	targetReplayVsRead       = 0.9  // a retry's replay against the read floor, at 8 and 32 clients
	targetDrainVsCreate      = 1.0  // the dispatcher keeps up with creates at 8 clients
	targetCallsPerDelivery   = 1.0
	targetDeskCallsPerStep   = 1.0 // the expedite's, when nothing fails: no lookup before a first call
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

// cell is the rounds of one scenario at one concurrency. Its fields are
// exported for the report's template.
type cell struct {
	RPS, P50, P99 []float64 // per round
	CPU           []float64 // µs per request (servers + PostgreSQL), per round; empty where not measured
	Errors, N     int
	FirstErr      string
	Statuses      statusmix.Mix
}

func cells(phases []phase) map[string]map[int]*cell {
	out := map[string]map[int]*cell{}
	for _, p := range phases {
		if out[p.scenario] == nil {
			out[p.scenario] = map[int]*cell{}
		}
		c := out[p.scenario][p.conc]
		if c == nil {
			c = &cell{Statuses: statusmix.Mix{}}
			out[p.scenario][p.conc] = c
		}
		c.add(p.load, p.cpuPerReq())
		c.Statuses.Add(p.load.statuses)
	}
	return out
}

// cpuPerReq is the primary figure: the CPU time of the servers and of
// PostgreSQL per request, in µs.
// add adds one round's load and CPU per request to c.
func (c *cell) add(l loadResult, cpuPerReq float64) {
	c.RPS = append(c.RPS, l.rps())
	if cpuMeasured {
		c.CPU = append(c.CPU, cpuPerReq)
	}
	c.P50 = append(c.P50, msf(l.quantile(.5)))
	c.P99 = append(c.P99, msf(l.quantile(.99)))
	c.Errors += l.errors
	c.N += l.n
	if c.FirstErr == "" {
		c.FirstErr = l.firstErr
	}
}

func (p phase) cpuPerReq() float64 {
	return float64((p.cpu.server + p.cpu.postgres).Microseconds()) / float64(max(p.load.n, 1))
}

// ratios returns the per-round ratios a/b of req/s at concurrency c.
func ratios(phases []phase, a, b string, c int) []float64 {
	return perRound(phases, a, b, c, func(p phase) float64 { return p.load.rps() })
}

// cpuRatios returns the per-round ratios of CPU per request at concurrency
// c, throughput-equivalent: b's CPU per request over a's, so that 0.75
// means a costs 1/0.75 of b.
func cpuRatios(phases []phase, a, b string, c int) []float64 {
	if !cpuMeasured {
		return nil
	}
	return perRound(phases, a, b, c, func(p phase) float64 { return 1 / max(p.cpuPerReq(), 1e-9) })
}

// perRound returns f(a)/f(b) of the phases at concurrency c, round by round.
func perRound(phases []phase, a, b string, c int, f func(phase) float64) []float64 {
	byRound := map[int]map[string]float64{}
	for _, p := range phases {
		if p.conc != c || p.load.n == 0 {
			continue
		}
		if byRound[p.round] == nil {
			byRound[p.round] = map[string]float64{}
		}
		byRound[p.round][p.scenario] = f(p)
	}
	var out []float64
	for _, r := range slices.Sorted(maps.Keys(byRound)) {
		if m := byRound[r]; m[a] > 0 && m[b] > 0 {
			out = append(out, m[a]/m[b])
		}
	}
	return out
}

// dbWork sums the database counters of a scenario's phases.
type dbWork struct {
	requests         int64
	calls, xids, wal int64
	buffers          int64 // shared buffers the statements touched
	walRecords       int64 // and the WAL records they wrote
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
			w.buffers += st.Buffers
			w.walRecords += st.WALRecords
			if s := w.byQuery[st.QueryID]; s != nil {
				s.add(st)
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
	cpuTarget := func(a, b string, c int, want float64) {
		name := fmt.Sprintf("%s / %s by CPU per request at %d clients", a, b, c)
		if !cpuMeasured {
			ts = append(ts, target{name: name, measured: notMeasured})
			return
		}
		// Judged on the median of the interleaved rounds; the rounds'
		// spread beside it shows whether a miss is inside the host's noise.
		rs := cpuRatios(r.phases, a, b, c)
		measured := notMeasured
		if len(rs) > 0 {
			measured = fmt.Sprintf("%.2f× (rounds %.2f–%.2f: %s)", median(rs), slices.Min(rs), slices.Max(rs), joinf(rs, "%.2f"))
		}
		ts = append(ts, target{name: name, measured: measured,
			want: fmt.Sprintf("≥ %.2f×", want), met: len(rs) > 0 && median(rs) >= want})
	}
	cpuTarget(scCreate, scKeyRow, 8, targetCreateVsRows8)
	cpuTarget(scCreate, scKeyRow, 32, targetCreateVsRows32)
	cpuTarget(scCreate2P, scCreate, 8, targetCreate2PVsCreate)
	cpuTarget(scCreate2P, scCreate, 32, targetCreate2PVsCreate)
	cpuTarget(scReplayA2, scRead, 8, targetReplayVsRead)
	cpuTarget(scReplayA2, scRead, 32, targetReplayVsRead)
	if d := r.drain; d != nil {
		create := 0.0
		if x := cs[scCreate][8]; x != nil {
			create = median(x.RPS)
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
	if x := r.expedite; x != nil {
		ts = append(ts, target{name: "expedite: desk calls per step (two steps each, nothing failing)",
			measured: fmt.Sprintf("%.2f (%d calls for %d expedites)", x.callsPerStep(), x.sum(slotCalls)+x.sum(chargeCalls)+x.sum(undoCalls), x.answered),
			want:     fmt.Sprintf("%.1f", targetDeskCallsPerStep), met: x.answered > 0 && x.callsPerStep() <= targetDeskCallsPerStep+0.0001})
		errs := 0
		for _, p := range x.phases {
			errs += p.load.errors
		}
		ts = append(ts, target{name: "expedite: 201s = confirmed orders = the desk's charged slots = its charges; errors",
			measured: fmt.Sprintf("%d = %d = %d = %d; %d", x.answered, x.confirmed, x.slots, x.charges, errs), want: "equal; 0",
			met: x.answered == x.confirmed && x.confirmed == x.slots && x.slots == x.charges && errs == 0, hard: true})
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
	cw, c2w, rw, ra2 := work(r.phases, scCreate), work(r.phases, scCreate2P), work(r.phases, scReplay), work(r.phases, scReplayA2)
	if r.opts.rounds > 0 && cw.calls > 0 {
		ts = append(ts, target{name: "SQL round trips (statements) per create (one phase)", measured: fmt.Sprintf("%.2f", cw.per(cw.calls)),
			want: fmt.Sprintf("≤ %d", targetCreateStatements), met: cw.per(cw.calls) <= targetCreateStatements+0.005})
		ts = append(ts, target{name: "commits (transactions with an xid) per create (one phase)", measured: fmt.Sprintf("%.2f", cw.per(cw.xids)),
			want: fmt.Sprintf("≤ %d", targetCreateCommits), met: cw.per(cw.xids) <= targetCreateCommits+0.01})
		ts = append(ts, target{name: "SQL round trips (statements) per create-2p", measured: fmt.Sprintf("%.2f", c2w.per(c2w.calls)),
			want: fmt.Sprintf("≤ %d", targetCreate2PStatements), met: c2w.per(c2w.calls) <= targetCreate2PStatements+0.005})
		ts = append(ts, target{name: "SQL round trips (statements) per replay", measured: fmt.Sprintf("%.2f", rw.per(rw.calls)),
			want: fmt.Sprintf("≤ %d", targetReplayStatements), met: rw.per(rw.calls) <= targetReplayStatements+0.005})
		ts = append(ts, target{name: "SQL round trips (statements) per replay-a2", measured: fmt.Sprintf("%.2f", ra2.per(ra2.calls)),
			want: fmt.Sprintf("≤ %d", targetReplayStatements), met: ra2.per(ra2.calls) <= targetReplayStatements+0.005})
	} else {
		ts = append(ts, target{name: "SQL round trips per create / replay", measured: "not counted (no pg_stat_statements)", want: "≤ 2 / ≤ 1"})
	}
	errs := 0
	for _, byConc := range cs {
		for _, c := range byConc {
			errs += c.Errors
		}
	}
	ts = append(ts, target{name: "errors in the measured phases", measured: fmt.Sprint(errs), want: "0", met: errs == 0, hard: true})
	rowsOK := r.rowsCreate == r.sentCreate && r.rowsBaseline == r.sentBaseline && r.rowsOutbox == r.sentOutbox && r.rowsKeyRow == r.sentKeyRow
	ts = append(ts, target{name: "business rows = 201s (create, baseline, baseline+outbox, baseline+key)",
		measured: fmt.Sprintf("%d = %d, %d = %d, %d = %d, %d = %d", r.rowsCreate, r.sentCreate, r.rowsBaseline, r.sentBaseline, r.rowsOutbox, r.sentOutbox, r.rowsKeyRow, r.sentKeyRow),
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

// reportTemplate is the report's text; markdown fills it with a page.
//
//go:embed report.md.tmpl
var reportTemplate string

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"median": median, "joinf": joinf, "ms": ms, "msf": msf, "mib": mib,
	"div": func(a, b float64) float64 { return a / b }, "join": strings.Join,
}).Parse(reportTemplate))

// page is what the report shows, computed: the template only lays it out.
type page struct {
	Command, Started                         string
	Elapsed                                  time.Duration
	Env                                      environment
	BaselineCommand                          string
	Rounds, Storms, StormSize, CountRequests int
	Duration, Warmup, FloorDuration          time.Duration
	Targets                                  []targetRow
	Cells                                    []cellRow
	Drain                                    *drainRow
	Expedite                                 *expediteRow
	RatioNames                               []string
	Ratios                                   []ratioRow
	Work                                     []workRow
	Statements                               []statementRow
	CPUMeasured                              bool
	NotMeasured                              string
	CPU                                      []cpuRow
	StormTotal                               stormRow
	StormRows                                string
	StormList                                []stormRow
	PeakRSS, RSSNow                          int64
	Floor                                    []floorRow
	FloorSummary                             *floorSummary
}

type targetRow struct{ Name, Measured, Want, Result string }

// targetRows are the rows of the targets' table: each target, its result.
func targetRows(ts []target) []targetRow {
	var rows []targetRow
	for _, t := range ts {
		res := "met"
		switch {
		case t.want == "":
			res = "n/a"
		case !t.met && t.hard:
			res = "**FAILED**"
		case !t.met:
			res = "**MISSED**"
		}
		rows = append(rows, targetRow{t.name, t.measured, t.want, res})
	}
	return rows
}

type cellRow struct {
	Scenario string
	Clients  int
	*cell
}

type drainRow struct {
	Rows, SubmitCalls, StatusCalls, Submitted, Submissions int
	Took                                                   time.Duration
	Rate, CallsPerDelivery                                 float64
	Dispatcher, Desk, Postgres, Machine                    time.Duration // CPU per delivery
	Statements                                             []drainStatementRow
}

// drainStatementRow is one statement of the drain, in serve's database or
// the desk's: its calls, and what it did, per delivery.
type drainStatementRow struct {
	DB, Query                                                  string
	Calls, RowsPerCall, Buffers, Dirtied, WALRecords, WALBytes float64
	Exec                                                       float64 // mean, ms
}

// drainStatementRows are the statements of db run at least once per hundred
// deliveries, most calls first.
func drainStatementRows(db string, sts []statement, deliveries int) []drainStatementRow {
	var rows []drainStatementRow
	n := float64(max(deliveries, 1))
	for _, st := range sts {
		if float64(st.Calls)/n < 0.01 {
			continue
		}
		calls := float64(max(st.Calls, 1))
		rows = append(rows, drainStatementRow{db, shortQuery(st.Query, 60), float64(st.Calls) / n, float64(st.Rows) / calls,
			float64(st.Buffers) / n, float64(st.Dirtied) / n, float64(st.WALRecords) / n, float64(st.WALBytes) / n, st.TotalExec / calls})
	}
	return rows
}

// expediteRow is the expedite phase: its cells by clients, and the desk's
// calls.
type expediteRow struct {
	Requests, Rounds, Answered int
	Cells                      []expediteCellRow
	Slot, Charge, Undo         int
	SlotDetail, ChargeDetail   string
	PerStep                    float64
}

// expediteCellRow is the expedite at one number of clients: the cell, and
// medians across rounds of the CPU per expedite of each process (µs), the
// statements per expedite in serve's database and in the desk's, and the
// transactions with an xid per expedite in both.
type expediteCellRow struct {
	Clients int
	*cell
	Serve, Desk, Postgres               float64
	Statements, DeskStatements, Commits float64
}

// ratioRow is the ratios at one concurrency, each by CPU per request
// (throughput-equivalent) and by req/s, per round.
type ratioRow struct {
	Clients int
	Ratios  []ratioCell // in the order of ratioPairs
}

type ratioCell struct{ CPU, RPS []float64 }

// ratioPairs are the ratios the report shows: scenario / reference.
var ratioPairs = [][2]string{{scCreate, scOutbox}, {scCreate, scKeyRow}, {scKeyRow, scOutbox}, {scCreate2P, scOutbox}, {scReplay, scRead}, {scReplayA2, scRead}, {scOutbox, scBaseline}}

type workRow struct {
	Scenario                                   string
	Statements, Xids, WAL, Buffers, WALRecords float64
	RoundTrips                                 string
}

type statementRow struct {
	Scenario, Query string
	Calls, Exec     float64
	Plan, ExecAtOne string
	// per call, under load
	Rows, Buffers, Dirtied, WALRecords, WALBytes float64
}

type cpuRow struct {
	Scenario                                        string
	Clients                                         int
	Servers, Postgres, Client, Total, Busy, Machine float64
}

type stormRow struct {
	Round, First, Replayed, Conflict, S5xx, Other, Rows int
	Elapsed, P50, P99                                   time.Duration
	FirstOther                                          string
}

type floorRow struct {
	Name, Sync, Errors string
	Clients            int
	RPS                float64
	P50, P99           time.Duration
}

// floorSummary compares a create's SQL with the baseline's INSERT, at 1
// client (p50) and, if At8, at 8 (ops/s).
type floorSummary struct {
	Claim, ClaimOff, ClaimFinish, Insert time.Duration
	At8                                  bool
	ClaimFinish8, Insert8                float64
}

// markdown renders the report.
func (r *report) markdown() string {
	o := r.opts
	pg := page{
		Command: r.command, Started: r.started.UTC().Format("2006-01-02 15:04 UTC"), Elapsed: r.elapsed.Round(time.Second),
		Env: r.env, BaselineCommand: baselineCommand,
		Rounds: o.rounds, Storms: o.storms, StormSize: o.stormSize, CountRequests: o.countRequests,
		Duration: o.duration, Warmup: o.warmup, FloorDuration: o.floorDuration,
		CPUMeasured: cpuMeasured, NotMeasured: notMeasured, StormRows: stormRowsSummary(r.storms),
		PeakRSS: r.peakRSS, RSSNow: r.rssAfter, FloorSummary: r.floorSummary(),
	}
	pg.Targets = targetRows(r.targets())
	cs := cells(r.phases)
	for _, sc := range scenarios {
		for _, c := range concurrencies {
			if x := cs[sc][c]; x != nil {
				pg.Cells = append(pg.Cells, cellRow{sc, c, x})
			}
		}
	}
	if d := r.drain; d != nil {
		pg.Drain = &drainRow{d.rows, d.submitCalls, d.statusCalls, d.submitted, d.submissions, d.took.Round(time.Millisecond),
			d.rate(), d.callsPerDelivery(), d.cpuDispatcher, d.cpuDesk, d.cpuPostgres, d.cpuMachine,
			append(drainStatementRows("serve's", d.statements, d.rows), drainStatementRows("the desk's", d.deskStatements, d.rows)...)}
	}
	if x := r.expedite; x != nil {
		row := &expediteRow{Requests: expediteRequests, Answered: x.answered, Slot: x.sum(slotCalls), Charge: x.sum(chargeCalls),
			Undo: x.sum(undoCalls), PerStep: x.callsPerStep(),
			SlotDetail:   fmt.Sprintf("%d reserve, %d lookups", x.calls[slotCalls[0]], x.calls[slotCalls[1]]),
			ChargeDetail: fmt.Sprintf("%d charge, %d lookups", x.calls[chargeCalls[0]], x.calls[chargeCalls[1]])}
		rounds := map[int]bool{}
		for _, p := range x.phases {
			rounds[p.round] = true
		}
		row.Rounds = len(rounds)
		ec := expediteCells(x)
		for _, c := range expediteConcurrencies {
			cl := ec[c]
			if cl == nil {
				continue
			}
			var srv, desk, pgc, st, dst, xid []float64
			for _, p := range x.phases {
				if p.conc != c {
					continue
				}
				n := float64(max(p.load.n, 1))
				srv, desk, pgc = append(srv, float64(p.cpu.server.Microseconds())/n), append(desk, float64(p.deskCPU.Microseconds())/n),
					append(pgc, float64(p.cpu.postgres.Microseconds())/n)
				st, dst, xid = append(st, p.per(p.statements)), append(dst, p.per(p.deskStatements)), append(xid, p.per(p.xids))
			}
			row.Cells = append(row.Cells, expediteCellRow{c, cl, median(srv), median(desk), median(pgc), median(st), median(dst), median(xid)})
		}
		pg.Expedite = row
	}
	for _, pair := range ratioPairs {
		pg.RatioNames = append(pg.RatioNames, pair[0]+" / "+pair[1])
	}
	for _, c := range concurrencies {
		row := ratioRow{Clients: c}
		for _, pair := range ratioPairs {
			row.Ratios = append(row.Ratios, ratioCell{cpuRatios(r.phases, pair[0], pair[1], c), ratios(r.phases, pair[0], pair[1], c)})
		}
		pg.Ratios = append(pg.Ratios, row)
	}
	for _, sc := range scenarios {
		w := work(r.phases, sc)
		nrt := "–"
		if c, ok := r.count(sc); ok {
			nrt = fmt.Sprintf("%.2f", c.perReq(c.roundTrips))
			if c.errors > 0 {
				nrt += fmt.Sprintf(" (%d errors: %s)", c.errors, c.firstErr)
			}
		}
		pg.Work = append(pg.Work, workRow{sc, w.per(w.calls), w.per(w.xids), w.per(w.wal), w.per(w.buffers), w.per(w.walRecords), nrt})
		pg.Statements = append(pg.Statements, r.statementRows(sc, w)...)
		if cpuMeasured {
			pg.CPU = append(pg.CPU, r.cpuRows(sc)...)
		}
	}
	for _, s := range r.storms {
		pg.StormList = append(pg.StormList, stormRow{s.round, s.first, s.replayed, s.conflict, s.s5xx, s.other, s.rows, s.elapsed, s.p50, s.p99, s.firstOther})
		t := &pg.StormTotal
		t.First, t.Replayed, t.Conflict, t.S5xx, t.Other = t.First+s.first, t.Replayed+s.replayed, t.Conflict+s.conflict, t.S5xx+s.s5xx, t.Other+s.other
	}
	for _, f := range r.floor {
		row := floorRow{Name: f.name, Sync: "on", Errors: fmt.Sprint(f.errors), Clients: f.conc, RPS: f.rps, P50: f.p50, P99: f.p99}
		if f.syncOff {
			row.Sync = "off"
		}
		if f.errors > 0 {
			row.Errors += " (" + f.firstErr + ")"
		}
		pg.Floor = append(pg.Floor, row)
	}
	var b strings.Builder
	if err := reportPage.Execute(&b, pg); err != nil {
		panic(fmt.Sprintf("the report template: %v", err)) // a bug, which TestReportRenders finds
	}
	return b.String()
}

// statementRows are the statements of scenario sc that run at least once
// per hundred requests: under load (w), and at one client (its round-trip
// count, with planning times).
func (r *report) statementRows(sc string, w dbWork) []statementRow {
	seq := map[int64]statement{}
	if c, ok := r.count(sc); ok {
		for _, st := range c.db.statements {
			id := textID(shortQuery(st.Query, 70))
			if prev, ok := seq[id]; ok {
				st.add(prev)
			}
			seq[id] = st
		}
	}
	var rows []statementRow
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
		calls := float64(max(st.Calls, 1))
		rows = append(rows, statementRow{sc, shortQuery(st.Query, 70), w.per(st.Calls), st.TotalExec / calls, plan, exec,
			float64(st.Rows) / calls, float64(st.Buffers) / calls, float64(st.Dirtied) / calls, float64(st.WALRecords) / calls, float64(st.WALBytes) / calls})
	}
	return rows
}

// cpuRows are the CPU times per request of scenario sc, medians across
// rounds, at each concurrency.
func (r *report) cpuRows(sc string) []cpuRow {
	var rows []cpuRow
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
		if len(tot) > 0 {
			rows = append(rows, cpuRow{sc, c, median(srv), median(pgc), median(cli), median(tot), median(busy), median(mach)})
		}
	}
	return rows
}

// floorSummary is nil unless the floor ran the loops it compares.
func (r *report) floorSummary() *floorSummary {
	claim, ok1 := r.floorResult("claim (new key)", 1, false)
	cf, ok2 := r.floorResult("claim + finish", 1, false)
	ins, ok3 := r.floorResult("plain insert", 1, false)
	claimOff, ok4 := r.floorResult("claim (new key)", 1, true)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil
	}
	s := &floorSummary{Claim: claim.p50, ClaimOff: claimOff.p50, ClaimFinish: cf.p50, Insert: ins.p50}
	cf8, ok1 := r.floorResult("claim + finish", 8, false)
	ins8, ok2 := r.floorResult("plain insert", 8, false)
	s.At8, s.ClaimFinish8, s.Insert8 = ok1 && ok2 && cf8.rps > 0, cf8.rps, ins8.rps
	return s
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
