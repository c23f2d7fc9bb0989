package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// expediteConcurrencies are the clients the expedite is measured at.
var expediteConcurrencies = []int{1, 8}

// expediteRequests is how many requests the expedite phase has to expedite,
// each once: more than its clients get through in the phase's time.
const expediteRequests = 30000

// expeditePhase is one measured closed-loop run of the expedite.
type expeditePhase struct {
	round, conc int
	load        loadResult
	cpu         cpuTimes // serve (as server) and PostgreSQL
	deskCPU     time.Duration
	// Statements of serve's database and of the desk's (pg_stat_statements),
	// and transactions with an xid in both.
	statements, deskStatements, xids int64
}

// expediteRun is what the expedite phase measured, beside the drain's
// servers: POST /v1/demo-requests/{id}/expedite, an operation of several
// steps with two calls to the review desk, each request once with a fresh
// key.
type expediteRun struct {
	phases []expeditePhase
	// answered counts the 201s of every expedite sent (warm-ups too);
	// calls the desk's expedite calls meanwhile, from its request log, by
	// method and route.
	idle      cpuTimes      // serve and PostgreSQL, over a second with nothing sent
	deskIdle  time.Duration // the desk, the same second
	answered  int
	calls     map[string]int
	confirmed int // orders confirmed in serve's database
	slots     int // the desk's slots, charged
	charges   int // the desk's charges
}

// The desk's routes an expedite calls: each step's call and its lookup,
// and the slot's release.
var (
	slotCalls   = []string{"POST /v1/slots", "GET /v1/slots/{key}"}
	chargeCalls = []string{"POST /v1/charges", "GET /v1/charges/{key}"}
	undoCalls   = []string{"POST /v1/slots/{key}/release", "GET /v1/releases/{key}"}
)

func (x *expediteRun) sum(routes []string) int {
	n := 0
	for _, r := range routes {
		n += x.calls[r]
	}
	return n
}

// callsPerStep is the desk calls per step of an expedite (two steps each):
// 1.0 when every step is one call.
func (x *expediteRun) callsPerStep() float64 {
	all := x.sum(slotCalls) + x.sum(chargeCalls) + x.sum(undoCalls)
	return float64(all) / float64(max(2*x.answered, 1))
}

// expediteRequestsSQL inserts the requests the phase expedites, with no
// outbox row: the dispatcher stays idle, and the desk sees only expedites.
const expediteRequestsSQL = `
INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
SELECT gen_random_uuid(), 'bench', 'accepted', 'bench-expedite', '', now() FROM generate_series(1, $1) i`

// expedite measures the expedite on srv, whose desk is desk (its request
// log counts the calls), at each of expediteConcurrencies, for rounds
// rounds; db is srv's database, deskDB the desk's.
func (b *bench) expedite(ctx context.Context, db, deskDB *sqlx.DB, dbid, deskDBID int64, srv, desk *serverProc, token string, rounds int) error {
	b.logf("expedite: at %v clients, %d rounds", expediteConcurrencies, rounds)
	var ids []string
	if err := db.SelectContext(ctx, &ids, `SELECT id::text FROM demo_requests WHERE topic = 'bench-expedite'`); err != nil {
		return err
	}
	mark, err := fileSize(desk.log)
	if err != nil {
		return err
	}
	cl := newClient(srv, nil, nil, nil, nil, token, 16)
	var next, answered atomic.Int64
	req := func(ctx context.Context, w, i int) (reply, bool) {
		n := int(next.Add(1)) - 1
		if n >= len(ids) {
			return reply{err: fmt.Errorf("no request left to expedite (%d)", len(ids))}, false
		}
		r := cl.postExpedite(ctx, ids[n], cl.newKey())
		ok := r.err == nil && r.status == http.StatusCreated && !r.replayed
		if ok {
			answered.Add(1)
		}
		return r, ok
	}
	appStats := &statsDB{admin: b.stats.admin, dbid: dbid, pgss: b.stats.pgss}
	deskStats := &statsDB{admin: b.stats.admin, dbid: deskDBID, pgss: b.stats.pgss}
	cpu := &cpuMeter{serverPids: []int{srv.cmd.Process.Pid}, postmasterPid: b.cpu.postmasterPid}
	deskCPU := &cpuMeter{serverPids: []int{desk.cmd.Process.Pid}}
	// What serve (its dispatcher and completer polling), the desk (its
	// sweep) and PostgreSQL use with nothing sent: each phase's CPU
	// includes it.
	idle, deskIdle := cpu.sample(), deskCPU.sample()
	sleepCtx(ctx, time.Second)
	x := &expediteRun{idle: cpu.sample().sub(idle), deskIdle: deskCPU.sample().sub(deskIdle).server}
	b.logf("expedite: idle for 1 s: serve %s, desk %s, PostgreSQL %s of CPU", x.idle.server, x.deskIdle, x.idle.postgres)
	for round := 1; round <= rounds; round++ {
		for _, c := range expediteConcurrencies {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			closedLoop(ctx, c, b.o.warmup, 0, req)
			var ph expeditePhase
			pc, err := appStats.measure(ctx, func() {
				before, deskBefore := cpu.sample(), deskCPU.sample()
				lr := closedLoop(ctx, c, b.o.duration, 0, req)
				ph = expeditePhase{round: round, conc: c, load: lr, cpu: cpu.sample().sub(before), deskCPU: deskCPU.sample().sub(deskBefore).server}
			})
			if err != nil {
				return err
			}
			deskSt, err := deskStats.statements(ctx)
			if err != nil {
				return err
			}
			ph.statements, ph.xids = pc.calls, pc.xids
			for _, st := range deskSt {
				ph.deskStatements += st.Calls
			}
			lr := ph.load
			x.phases = append(x.phases, ph)
			n := time.Duration(max(lr.n, 1))
			b.logf("expedite round %d/%d @%-2d %5.0f µs CPU/req (serve %s, desk %s, PostgreSQL %s) %7.0f req/s  p50 %6s  p99 %6s  errors %d %s; per expedite: statements %.2f + desk %.2f, xids %.2f",
				round, rounds, c, ph.cpuPerReq(), ph.cpu.server/n, ph.deskCPU/n, ph.cpu.postgres/n,
				lr.rps(), ms(lr.quantile(.5)), ms(lr.quantile(.99)), lr.errors, lr.firstErr,
				ph.per(ph.statements), ph.per(ph.deskStatements), ph.per(ph.xids))
		}
	}
	x.answered = int(answered.Load())
	// The desk logs each request once it answered it: by now, every call.
	if x.calls, err = deskCalls(desk.log, mark); err != nil {
		return err
	}
	if err := db.GetContext(ctx, &x.confirmed, `SELECT count(*) FROM expedites WHERE state = 'confirmed'`); err != nil {
		return err
	}
	if err := deskDB.GetContext(ctx, &x.slots, `SELECT count(*) FROM slots WHERE state = 'charged'`); err != nil {
		return err
	}
	if err := deskDB.GetContext(ctx, &x.charges, `SELECT count(*) FROM charges`); err != nil {
		return err
	}
	b.logf("expedite: %d answered, %d desk calls (%.2f per step), %d confirmed, the desk's slots %d and charges %d",
		x.answered, x.sum(slotCalls)+x.sum(chargeCalls)+x.sum(undoCalls), x.callsPerStep(), x.confirmed, x.slots, x.charges)
	b.rep.expedite = x
	return nil
}

func (p expeditePhase) per(v int64) float64 { return float64(v) / float64(max(p.load.n, 1)) }

// cpuPerReq is the CPU time of serve, the desk and PostgreSQL (both
// databases) per expedite, in µs.
func (p expeditePhase) cpuPerReq() float64 {
	return float64((p.cpu.server + p.deskCPU + p.cpu.postgres).Microseconds()) / float64(max(p.load.n, 1))
}

// postExpedite sends POST /v1/demo-requests/{id}/expedite under key.
func (c *client) postExpedite(ctx context.Context, id, key string) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.api.base+"/v1/demo-requests/"+id+"/expedite", http.NoBody)
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Idempotency-Key", key)
	return c.do(req)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// deskCalls counts the requests the desk logged (its JSON request log)
// after offset, by method and route.
func deskCalls(path string, offset int64) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	calls := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct{ Msg, Method, Route string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "request" && line.Route != "" {
			calls[line.Method+" "+line.Route]++
		}
	}
	return calls, sc.Err()
}

// expediteCells are the rounds of the expedite, by concurrency.
func expediteCells(x *expediteRun) map[int]*cell {
	out := map[int]*cell{}
	for _, p := range x.phases {
		c := out[p.conc]
		if c == nil {
			c = &cell{}
			out[p.conc] = c
		}
		c.add(p.load, p.cpuPerReq())
	}
	return out
}

// expediteWait is how long the phase should take: its loops, and a guess
// at the rest.
func (b *bench) expediteWait(rounds int) time.Duration {
	return time.Second + time.Duration(rounds*len(expediteConcurrencies))*(b.o.warmup+b.o.duration)
}
