package main

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"
)

// levelPhase is one measured phase at a level, with the buffers its
// statements used.
type levelPhase struct {
	phase
	blocks blockCounts
}

// levelRun is the key table filled to one level and what was measured
// there.
type levelRun struct {
	keys, filled         int
	fillTook, settleTook time.Duration
	phases               []levelPhase
	beside               []levelPhase // the empty key table's, measured in the same rounds
	table                tableStats
	sweep                levelSweep
	checkpoints          int64 // started during the measured phases
	hashIndex            int64 // bytes of an index on a 16-byte hash of the scope, built fresh; 0: not built
}

// scaleReport is everything one run of the scale mode measured.
type scaleReport struct {
	opts     options
	so       scaleOptions
	command  string
	started  time.Time
	elapsed  time.Duration
	env      environment
	diskNeed int64
	diskUsed int64
	peakDisk int64

	pgstattuple bool
	levels      []levelRun
	churns      []*churnRun
}

// The scale targets. Cost ratios are the level's CPU per request over the
// empty table's (lower is better).
const (
	targetCreateGrowth  = 1.3  // a create at the largest level against one on the empty table
	targetReplayGrowth  = 1.3  // the same for a replay
	targetSweepHeadroom = 2.0  // the sweeper's deletes per second of its statements over the create rate
	targetSizeSwing     = 0.15 // the table's and indexes' size over the judged periods, either way
)

// cpuByRound returns the per-round CPU per request of a scenario at
// concurrency c among phases, in round order.
func cpuByRound(phases []levelPhase, sc string, c int) []float64 {
	var out []float64
	for _, p := range phases {
		if p.scenario == sc && p.conc == c && p.load.n > 0 {
			out = append(out, p.cpuPerReq())
		}
	}
	return out
}

// levelCell sums a scenario's phases at one concurrency of a level.
type levelCell struct {
	Keys, Clients                 int
	Scenario                      string
	CPU, RPS, P50, P99            []float64 // per round
	PGCPU                         []float64 // PostgreSQL's share of CPU, µs per request, per round
	Hit, Read, Dirtied, WAL, Xids float64   // per request, over the rounds
	Errors, N                     int
	FirstErr                      string
}

func (lv levelRun) cell(sc string, c int) *levelCell {
	x := &levelCell{Keys: lv.keys, Clients: c, Scenario: sc}
	var hit, read, dirtied, wal, xids int64
	for _, p := range lv.phases {
		if p.scenario != sc || p.conc != c {
			continue
		}
		if cpuMeasured {
			x.CPU = append(x.CPU, p.cpuPerReq())
			x.PGCPU = append(x.PGCPU, float64(p.cpu.postgres.Microseconds())/float64(max(p.load.n, 1)))
		}
		x.RPS = append(x.RPS, p.load.rps())
		x.P50 = append(x.P50, msf(p.load.quantile(.5)))
		x.P99 = append(x.P99, msf(p.load.quantile(.99)))
		x.Errors += p.load.errors
		x.N += p.load.n
		if x.FirstErr == "" {
			x.FirstErr = p.load.firstErr
		}
		hit, read, dirtied = hit+p.blocks.hit, read+p.blocks.read, dirtied+p.blocks.dirtied
		wal, xids = wal+p.db.walBytes, xids+p.db.xids
	}
	if x.N == 0 {
		return nil
	}
	n := float64(x.N)
	x.Hit, x.Read, x.Dirtied, x.WAL, x.Xids = float64(hit)/n, float64(read)/n, float64(dirtied)/n, float64(wal)/n, float64(xids)/n
	return x
}

// growth is the per-round cost ratios of a scenario at concurrency c: the
// largest level's CPU per request over the empty table's measured in the
// same round beside it.
func (r *scaleReport) growth(sc string, c int) []float64 {
	if len(r.levels) < 2 || !cpuMeasured {
		return nil
	}
	last := r.levels[len(r.levels)-1]
	a, b := cpuByRound(last.phases, sc, c), cpuByRound(last.beside, sc, c)
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

func (r *scaleReport) targets() []target {
	var ts []target
	if len(r.levels) >= 2 {
		last := r.levels[len(r.levels)-1].keys
		for _, g := range []struct {
			sc   string
			want float64
		}{{scCreate, targetCreateGrowth}, {scReplay, targetReplayGrowth}} {
			for _, c := range levelConcurrencies {
				name := fmt.Sprintf("%s at %s keys / on the empty table in the same rounds, by CPU per request at %d clients", g.sc, count(last), c)
				rs := r.growth(g.sc, c)
				if len(rs) == 0 {
					ts = append(ts, target{name: name, measured: notMeasured})
					continue
				}
				ts = append(ts, target{name: name,
					measured: fmt.Sprintf("%.2f× (rounds %.2f–%.2f: %s)", median(rs), slices.Min(rs), slices.Max(rs), joinf(rs, "%.2f")),
					want:     fmt.Sprintf("≤ %.2f×", g.want), met: median(rs) <= g.want})
			}
		}
	}
	errs := 0
	for _, lv := range r.levels {
		for _, p := range append(slices.Clone(lv.phases), lv.beside...) {
			errs += p.load.errors
		}
	}
	ts = append(ts, target{name: "errors in the levels' measured phases", measured: fmt.Sprint(errs), want: "0", met: errs == 0, hard: true})
	for _, lv := range r.levels {
		if lv.sweep.err != "" {
			ts = append(ts, target{name: fmt.Sprintf("the sweeper's statement at %s keys", count(lv.keys)),
				measured: fmt.Sprintf("failed after %d keys in %d statements: %s", lv.sweep.rows, lv.sweep.statements, lv.sweep.err),
				want:     "no error", hard: true})
		}
	}
	for _, ch := range r.churns {
		pre := "churn"
		if len(r.churns) > 1 {
			pre = "churn (" + ch.variant + ")"
		}
		capacity := ch.sweepCapacity()
		ts = append(ts, target{name: pre + ": the sweeper's deletes per second of its statements / the create rate",
			measured: fmt.Sprintf("%.0f / %.0f = %.1f× (%d rows deleted in %d statements, %.0f ms)", capacity, ch.rate, capacity/ch.rate, ch.deletes, ch.sweepCalls, ch.sweepExec),
			want:     fmt.Sprintf("≥ %.0f×", targetSweepHeadroom), met: capacity >= targetSweepHeadroom*ch.rate})
		lo, hi, base, ok := ch.sizeSwing()
		if ok {
			ts = append(ts, target{name: fmt.Sprintf("%s: table + indexes over %d TTL periods, against their size at the first", pre, ch.periods-1),
				measured: fmt.Sprintf("%s: %+.0f%% … %+.0f%%", mib(base), lo*100, hi*100),
				want:     fmt.Sprintf("within ±%.0f%%", targetSizeSwing*100), met: lo >= -targetSizeSwing && hi <= targetSizeSwing})
		}
		ts = append(ts, target{name: pre + ": creates due but not sent (every sender busy); errors",
			measured: fmt.Sprintf("%d; %d", ch.dropped, ch.load.errors), want: "0; 0", met: ch.dropped == 0 && ch.load.errors == 0, hard: ch.load.errors > 0})
	}
	return ts
}

// sizeSwing is how far the table's and indexes' size moved over the
// judged periods, as fractions of the size at their start.
func (c *churnRun) sizeSwing() (lo, hi float64, base int64, ok bool) {
	js := c.judgedSamples()
	if len(js) < 2 {
		return 0, 0, 0, false
	}
	base = js[0].size()
	for _, s := range js {
		d := float64(s.size()-base) / float64(base)
		lo, hi = min(lo, d), max(hi, d)
	}
	return lo, hi, base, true
}

// count writes a number of keys as people say it: 0, 100 k, 1 M, 10 M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%d M", n/1_000_000)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1f M", float64(n)/1e6)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%d k", n/1000)
	}
	return fmt.Sprint(n)
}

// verdict returns the failed hard checks and the missed targets.
func (r *scaleReport) verdict() (failures, misses []string) {
	for _, t := range r.targets() {
		switch {
		case t.met || t.want == "":
		case t.hard:
			failures = append(failures, t.name+": "+t.measured)
		default:
			misses = append(misses, t.name+": "+t.measured)
		}
	}
	return failures, misses
}

//go:embed scale.md.tmpl
var scaleTemplate string

var scalePageTemplate = template.Must(template.New("scale").Funcs(template.FuncMap{
	"median": median, "joinf": joinf, "mib": mib, "gib": gib, "count": count, "join": strings.Join,
	"secs": func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() },
}).Parse(scaleTemplate))

// scalePage is what the scale report shows, computed: the template only
// lays it out.
type scalePage struct {
	Command, Started          string
	Elapsed                   time.Duration
	Env                       environment
	DiskNeed, DiskUsed        int64
	Rounds                    int
	Duration, Warmup          time.Duration
	TTL                       time.Duration
	Targets                   []targetRow
	Levels                    []levelRow
	Cells                     []*levelCell
	CPUMeasured, PGStatTuple  bool
	Prewarm                   bool
	NotMeasured               string
	Why                       []string // for each missed growth target, what changed between the levels
	Churns                    []churnRow
	ChurnRate                 float64
	ChurnTTL                  time.Duration
	ChurnPeriods, JudgedCount int
}

type levelRow struct {
	Keys, Filled                 int
	Rows                         int64
	FillTook, SettleTook         time.Duration
	Heap, Indexes, PKey          int64
	BytesPerKey, PKeyBytesPerKey float64
	PKeyLevels                   int
	PKeyLeafDensity              float64
	FillRate                     float64
	Checkpoints                  int64
	HashKeyBytesPerKey           float64 // an index on a 16-byte hash of the scope, built for comparison; 0: not built
	Sweep                        *sweepRow
}

// sweepRow is the sweeper's statement and a VACUUM at one level.
type sweepRow struct {
	Err, Plan                  string
	Rows                       int64
	Statements, Batch          int
	Took, VacTook              time.Duration
	Rate, WALPerKey, CPUPerKey float64
	VacWALPerKey, VacCPUPerKey float64
}

type churnRow struct {
	Variant, Reloptions                   string
	Interval                              time.Duration
	Batch, Prefilled                      int
	Creates, Dropped, Errors              int
	RPS, P50, P99                         float64
	KeysMin, KeysMax, ExpiredMax, DeadMax int64
	SizeStart, SizeMin, SizeMax, SizeEnd  int64
	HeapEnd, IndexesEnd                   int64
	SwingLo, SwingHi                      float64
	Deletes                               int64
	DeletesPerSec, SweepCapacity          float64
	SweepCalls, SweepRows                 int64
	SweepExec                             float64
	Autovacuums                           int64
	WALPerCreate, CPUPerCreate            float64
	Judged                                time.Duration
}

func (r *scaleReport) markdown() (string, error) {
	pg := scalePage{
		Command: r.command, Started: r.started.UTC().Format("2006-01-02 15:04 UTC"), Elapsed: r.elapsed.Round(time.Second),
		Env: r.env, DiskNeed: r.diskNeed, DiskUsed: r.diskUsed, Rounds: r.opts.rounds, Duration: r.opts.duration, Warmup: r.opts.warmup,
		TTL: r.so.ttl, CPUMeasured: cpuMeasured, PGStatTuple: r.pgstattuple, Prewarm: r.so.prewarm, NotMeasured: notMeasured,
		ChurnRate: r.so.churnRate, ChurnTTL: r.so.churnTTL, ChurnPeriods: r.so.churnPeriods, JudgedCount: r.so.churnPeriods - 1,
	}
	pg.Targets = targetRows(r.targets())
	pg.Why = r.why()
	for _, lv := range r.levels {
		t := lv.table
		row := levelRow{Keys: lv.keys, Filled: lv.filled, Rows: t.rows, FillTook: lv.fillTook.Round(time.Second), SettleTook: lv.settleTook.Round(time.Second),
			Heap: t.heap, Indexes: t.indexes, PKey: t.pkey, PKeyLevels: t.pkeyLevels, PKeyLeafDensity: t.pkeyLeafDensity, Checkpoints: lv.checkpoints}
		if lv.hashIndex > 0 && t.rows > 0 {
			row.HashKeyBytesPerKey = float64(lv.hashIndex) / float64(t.rows)
		}
		if t.rows > 0 {
			row.BytesPerKey = float64(t.heap+t.indexes) / float64(t.rows)
			row.PKeyBytesPerKey = float64(t.pkey) / float64(t.rows)
		}
		if lv.filled > 0 {
			row.FillRate = float64(lv.filled) / lv.fillTook.Seconds()
		}
		if sw := lv.sweep; sw.rows > 0 || sw.err != "" {
			n := float64(sw.rows)
			row.Sweep = &sweepRow{Err: sw.err, Plan: sw.plan, Rows: sw.rows, Statements: sw.statements, Batch: sw.batch,
				Took: sw.sweepTook.Round(time.Millisecond), VacTook: sw.vacTook.Round(time.Millisecond),
				Rate: n / sw.sweepTook.Seconds(), WALPerKey: float64(sw.sweepWAL) / n, VacWALPerKey: float64(sw.vacWAL) / n}
			if cpuMeasured {
				row.Sweep.CPUPerKey = float64((sw.sweepCPU.server + sw.sweepCPU.postgres).Microseconds()) / n
				row.Sweep.VacCPUPerKey = float64((sw.vacCPU.server + sw.vacCPU.postgres).Microseconds()) / n
			}
		}
		pg.Levels = append(pg.Levels, row)
		for _, c := range levelConcurrencies {
			for _, sc := range levelScenarios {
				if x := lv.cell(sc, c); x != nil {
					pg.Cells = append(pg.Cells, x)
				}
			}
		}
	}
	for _, ch := range r.churns {
		row := churnRow{Variant: ch.variant, Reloptions: strings.Join(ch.reloptions, ", "), Interval: ch.interval, Batch: ch.batch,
			Prefilled: ch.prefilled, Creates: ch.load.n, Dropped: ch.dropped, Errors: ch.load.errors, RPS: ch.load.rps(),
			P50: msf(ch.load.quantile(.5)), P99: msf(ch.load.quantile(.99)), Deletes: ch.deletes,
			SweepCapacity: ch.sweepCapacity(), SweepCalls: ch.sweepCalls, SweepRows: ch.deletes, SweepExec: ch.sweepExec,
			Autovacuums: ch.autovacuums, WALPerCreate: ch.walPerCreate(), Judged: ch.judged.Round(time.Second)}
		if row.Reloptions == "" {
			row.Reloptions = "none (PostgreSQL's defaults)"
		}
		if ch.judged > 0 {
			row.DeletesPerSec = float64(ch.deletes) / ch.judged.Seconds()
		}
		if cpuMeasured && ch.load.n > 0 {
			row.CPUPerCreate = float64((ch.cpu.server + ch.cpu.postgres).Microseconds()) / float64(ch.load.n)
		}
		js := ch.judgedSamples()
		for i, s := range js {
			if i == 0 {
				row.KeysMin, row.KeysMax, row.SizeStart, row.SizeMin, row.SizeMax = s.keys, s.keys, s.size(), s.size(), s.size()
			}
			row.KeysMin, row.KeysMax = min(row.KeysMin, s.keys), max(row.KeysMax, s.keys)
			row.SizeMin, row.SizeMax = min(row.SizeMin, s.size()), max(row.SizeMax, s.size())
			row.ExpiredMax, row.DeadMax = max(row.ExpiredMax, s.expired), max(row.DeadMax, s.dead)
			row.SizeEnd, row.HeapEnd, row.IndexesEnd = s.size(), s.heap, s.indexes
		}
		row.SwingLo, row.SwingHi, _, _ = ch.sizeSwing()
		row.SwingLo, row.SwingHi = row.SwingLo*100, row.SwingHi*100
		pg.Churns = append(pg.Churns, row)
	}
	var b strings.Builder
	if err := scalePageTemplate.Execute(&b, pg); err != nil {
		return "", err
	}
	return b.String(), nil
}

// why says, for each growth target missed, what the statements did
// differently at the largest level than at the first: the measurements
// that explain a cost that grew.
func (r *scaleReport) why() []string {
	if len(r.levels) < 2 || !cpuMeasured {
		return nil
	}
	a, b := r.levels[0], r.levels[len(r.levels)-1]
	var out []string
	for _, g := range []struct {
		sc   string
		want float64
	}{{scCreate, targetCreateGrowth}, {scReplay, targetReplayGrowth}} {
		for _, c := range levelConcurrencies {
			rs := r.growth(g.sc, c)
			if len(rs) == 0 || median(rs) <= g.want {
				continue
			}
			x, y := a.cell(g.sc, c), b.cell(g.sc, c)
			if x == nil || y == nil {
				continue
			}
			srvX, srvY := median(x.CPU)-median(x.PGCPU), median(y.CPU)-median(y.PGCPU)
			out = append(out, fmt.Sprintf("%s at %d clients, %s → %s keys: PostgreSQL's CPU per request %.0f → %.0f µs, the server's %.0f → %.0f µs; "+
				"blocks hit %.1f → %.1f, read from the operating system %.2f → %.2f, dirtied %.2f → %.2f; WAL %.0f → %.0f bytes; "+
				"primary key %d → %d levels, %s → %s, shared_buffers %s; checkpoints during the phases %d → %d",
				g.sc, c, count(a.keys), count(b.keys), median(x.PGCPU), median(y.PGCPU), srvX, srvY,
				x.Hit, y.Hit, x.Read, y.Read, x.Dirtied, y.Dirtied, x.WAL, y.WAL,
				a.table.pkeyLevels, b.table.pkeyLevels, mib(a.table.pkey), mib(b.table.pkey), r.so.sharedBuffers, a.checkpoints, b.checkpoints))
		}
	}
	return out
}
