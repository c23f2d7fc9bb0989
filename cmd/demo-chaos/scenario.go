package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/faultproxy"
)

// scenario is one fault: inject breaks something while the load runs, heal
// mends it after hold.
type scenario struct {
	name, what   string
	hold         time.Duration
	inject, heal func(ctx context.Context, e *env) error
	deskFault    bool // the review desk misbehaves: deliveries may end unknown
}

func links(l faultproxy.Link) func(context.Context, *env) error {
	return func(_ context.Context, e *env) error {
		for _, r := range e.replicas {
			r.proxy.Set(l)
		}
		return nil
	}
}

func desk(f string) func(context.Context, *env) error {
	return func(_ context.Context, e *env) error { return e.deskFaults(f) }
}

func kill(i int, sig syscall.Signal) func(context.Context, *env) error {
	return func(_ context.Context, e *env) error { e.replicas[i].kill(sig); return nil }
}

func restart(i int) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error { return e.start(ctx, e.replicas[i].proc, "/readyz") }
}

func pgRestart(mode string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error { return e.pg.Restart(ctx, mode) }
}

func nothing(context.Context, *env) error { return nil }

var scenarios = []scenario{
	{name: "sigkill-replica", what: "SIGKILL replica 1 under load, restart it 2 s later", hold: 2 * time.Second,
		inject: kill(0, syscall.SIGKILL), heal: restart(0)},
	{name: "sigterm-replica", what: "SIGTERM replica 2 (a graceful stop), restart it 2 s later", hold: 2 * time.Second,
		inject: kill(1, syscall.SIGTERM), heal: restart(1)},
	{name: "pg-restart-fast", what: "pg_ctl restart -m fast", hold: 0, inject: pgRestart("fast"), heal: nothing},
	{name: "pg-restart-immediate", what: "pg_ctl restart -m immediate (a crash, then recovery)", hold: 0, inject: pgRestart("immediate"), heal: nothing},
	{name: "cut-link-3s", what: "both replicas' database links cut for 3 s", hold: 3 * time.Second,
		inject: links(faultproxy.Cut), heal: links(faultproxy.Up)},
	{name: "blackhole-5s", what: "both links hold every byte for 5 s", hold: 5 * time.Second,
		inject: links(faultproxy.Blackhole), heal: links(faultproxy.Up)},
	{name: "blackhole-past-lease", what: "both links hold every byte for 7 s, longer than the 4 s lease", hold: 7 * time.Second,
		inject: links(faultproxy.Blackhole), heal: links(faultproxy.Up)},
	{name: "mute-then-cut", what: "replies dropped for 2 s (statements run, answers lost), then the links cut for 1 s", hold: 3 * time.Second,
		inject: func(ctx context.Context, e *env) error {
			links(faultproxy.Mute)(ctx, e)
			time.AfterFunc(2*time.Second, func() { links(faultproxy.Cut)(ctx, e) })
			return nil
		}, heal: links(faultproxy.Up)},
	{name: "kill-dispatcher", what: "the desk holds its answers; SIGKILL replica 2 (a dispatcher) meanwhile, restart it", hold: 2 * time.Second,
		inject: func(ctx context.Context, e *env) error {
			if err := e.deskFaults(`{"holdAnswer":"10s"}`); err != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond) // some submissions are accepted and held
			return kill(1, syscall.SIGKILL)(ctx, e)
		},
		heal: func(ctx context.Context, e *env) error {
			if err := e.deskFaults(`{}`); err != nil {
				return err
			}
			return restart(1)(ctx, e)
		}, deskFault: true},
	{name: "desk-down", what: "the review desk down for 4 s", hold: 4 * time.Second, inject: desk(`{"down":true}`), heal: desk(`{}`), deskFault: true},
	{name: "desk-slow", what: "the review desk 2 s slow (past the 1 s call timeout) for 4 s", hold: 4 * time.Second,
		inject: desk(`{"delay":"2s"}`), heal: desk(`{}`), deskFault: true},
	{name: "desk-drop", what: "the review desk accepts and drops its next 50 answers", hold: 4 * time.Second,
		inject: desk(`{"dropResponses":50}`), heal: desk(`{}`), deskFault: true},
}

func scenarioNames() []string {
	var names []string
	for _, sc := range scenarios {
		names = append(names, sc.name)
	}
	return names
}

// probe is what /readyz or /metrics answered during a scenario.
type probe struct {
	mu            sync.Mutex
	during, after map[int]int // status (0: no answer) → count
	slowest       time.Duration
	healed        atomic.Bool
}

func (p *probe) record(status int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.during
	if p.healed.Load() {
		m = p.after
	}
	m[status]++
	p.slowest = max(p.slowest, took)
}

func (p *probe) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	show := func(m map[int]int) string {
		var parts []string
		for _, s := range slices.Sorted(mapKeys(m)) {
			name := strconv.Itoa(s)
			if s == 0 {
				name = "none"
			}
			parts = append(parts, fmt.Sprintf("%s×%d", name, m[s]))
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("during: %s; after: %s; slowest %s", show(p.during), show(p.after), p.slowest.Round(time.Millisecond))
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// result is one scenario's figures and failed checks.
type result struct {
	scenario                           scenario
	intents, created, refused, unknown int
	resolvedCompleted, resolvedNever   int
	duplicates, lostAcks               int
	replaysChecked                     int
	statuses                           map[string]int
	longestBlocked, recovery           time.Duration
	readyz, metrics                    *probe
	deliveries                         map[string]int // outbox states after the drain
	failures                           []string
}

func (r *result) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// runScenario runs the load, the fault and the checks of sc, the n-th
// scenario of the campaign; quota is its share of the intents.
func (e *env) runScenario(ctx context.Context, sc scenario, n, quota int, o options) (*result, error) {
	res := &result{scenario: sc, readyz: newProbe(), metrics: newProbe()}
	t := newTally()
	ans := &answers{m: map[string][]byte{}}
	hc := &http.Client{Transport: recorder{next: e.transport, answers: ans}}
	workers := make([]*worker, o.workers)
	for i := range workers {
		w, err := newWorker(e, hc, ans, t)
		if err != nil {
			return nil, err
		}
		workers[i] = w
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	for _, r := range e.replicas {
		probes.Go(func() { watch(probeCtx, r.url+"/readyz", res.readyz) })
		probes.Go(func() { watch(probeCtx, r.url+"/metrics", res.metrics) })
	}

	// The load: the quota spread over the timeline (a second before the
	// fault, the fault, two seconds after the heal).
	topic := fmt.Sprintf("chaos %s %d", sc.name, n)
	pace := newPacer(quota, time.Second+sc.hold+afterHeal)
	var mu sync.Mutex
	var intents []*intent
	var healedAt atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			for j := 0; pace.take(ctx); j++ {
				it, _ := client.NewIntent(client.CreateInput{Topic: topic, Note: fmt.Sprintf("worker %d, intent %d", i, j)})
				in := &intent{it: it, topic: topic, note: fmt.Sprintf("worker %d, intent %d", i, j), started: time.Now()}
				w.send(ctx, in, (i+j)%2)
				if in.outcome != "unknown" {
					t.answered(it.Key, in.answered)
				}
				mu.Lock()
				intents = append(intents, in)
				if h := healedAt.Load(); h != nil && in.outcome == "created" && in.started.After(*h) && res.recovery == 0 {
					res.recovery = in.answered.Sub(*h) // the first success that began after the heal
				}
				mu.Unlock()
			}
		})
	}

	sleepCtx(ctx, time.Second)
	err := sc.inject(ctx, e)
	if err == nil {
		sleepCtx(ctx, sc.hold)
		err = sc.heal(ctx, e)
		now := time.Now()
		healedAt.Store(&now)
		res.readyz.healed.Store(true)
		res.metrics.healed.Store(true)
		sleepCtx(ctx, afterHeal)
	}
	pace.end()
	wg.Wait()
	stopProbes()
	probes.Wait()
	if err != nil {
		return nil, fmt.Errorf("inject or heal: %w", err)
	}
	res.statuses, res.longestBlocked = t.statuses, t.blocked
	settler, err := newWorker(e, &http.Client{Transport: e.transport}, &answers{m: map[string][]byte{}}, nil)
	if err != nil {
		return nil, err
	}
	return res, e.check(ctx, res, intents, settler.clients)
}

// afterHeal is how long the load goes on after the heal.
const afterHeal = 2 * time.Second

func newProbe() *probe { return &probe{during: map[int]int{}, after: map[int]int{}} }

// watch asks url every 250 ms, each time with a 3 s timeout.
func watch(ctx context.Context, url string, p *probe) {
	hc := &http.Client{Timeout: 3 * time.Second}
	for ctx.Err() == nil {
		start := time.Now()
		status := 0
		if resp, err := hc.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		p.record(status, time.Since(start))
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// check settles the unknown outcomes, then checks the scenario's intents
// and the whole database.
func (e *env) check(ctx context.Context, res *result, intents []*intent, clients [2]*client.Client) error {
	res.intents = len(intents)
	for _, in := range intents {
		switch in.outcome {
		case "created":
			res.created++
		case "refused":
			res.refused++
		case "unknown":
			res.unknown++
			if err := e.resolve(ctx, res, in, clients); err != nil {
				return err
			}
		}
	}

	// The database as a whole: one business row per completed create, and
	// none without its key.
	var keys, rows, orphans, keyless, stuck int
	for _, q := range []struct {
		dest *int
		sql  string
	}{
		{&keys, `SELECT count(*) FROM idempotency_keys WHERE actor_id = $1 AND operation = 'demo-requests.create' AND state = 'completed' AND status_code = 201`},
		{&rows, `SELECT count(*) FROM demo_requests WHERE actor_id = $1`},
		{&orphans, `SELECT count(*) FROM demo_requests r WHERE r.actor_id = $1 AND NOT EXISTS (
			SELECT 1 FROM idempotency_keys k WHERE k.actor_id = r.actor_id AND k.result_id = r.id::text)`},
		{&keyless, `SELECT count(*) FROM idempotency_keys k WHERE k.actor_id = $1 AND k.state = 'completed' AND k.status_code = 201
			AND NOT EXISTS (SELECT 1 FROM demo_requests r WHERE r.id::text = k.result_id)`},
		{&stuck, `SELECT count(*) FROM idempotency_keys WHERE actor_id = $1 AND state = 'in_progress' AND lease_until < now() - interval '5 seconds'`},
	} {
		if err := e.db.GetContext(ctx, q.dest, q.sql, actor); err != nil {
			return err
		}
	}
	res.duplicates = rows - keys + orphans
	if rows != keys || orphans > 0 || keyless > 0 {
		res.fail("%d business rows for %d completed keys (%d rows without a key, %d keys without a row)", rows, keys, orphans, keyless)
	}
	if stuck > 0 {
		res.fail("%d keys in progress past their lease and 5 s", stuck)
	}

	// What the clients saw: each success has its row, under its key, and
	// replays the bytes stored.
	for _, in := range intents {
		if in.outcome != "created" {
			continue
		}
		var resultID string
		var stored []byte
		err := e.db.QueryRowContext(ctx, `SELECT k.result_id, k.response_body FROM idempotency_keys k
			JOIN demo_requests r ON r.id::text = k.result_id
			WHERE k.actor_id = $1 AND k.operation = 'demo-requests.create' AND k.idem_key = $2`, actor, in.it.Key).Scan(&resultID, &stored)
		if err != nil || resultID != in.requestID {
			res.lostAcks++
			res.fail("intent %s: the client got request %s, the database has %q (%v)", in.it.Key, in.requestID, resultID, err)
			continue
		}
		body, status, err := e.replay(ctx, in)
		if err != nil {
			return err
		}
		res.replaysChecked++
		if status != http.StatusCreated || !bytes.Equal(body, stored) {
			res.fail("intent %s: the replay is %d %q, not the stored bytes", in.it.Key, status, body)
		}
	}
	return e.checkOutbox(ctx, res)
}

// resolve asks the outcome route what became of an unknown intent, on
// either replica, until it is completed or never happened.
func (e *env) resolve(ctx context.Context, res *result, in *intent, clients [2]*client.Client) error {
	deadline := time.Now().Add(lease + 15*time.Second)
	for n := 0; ; n++ {
		o, err := clients[n%2].Resolve(ctx, in.it.Key)
		switch {
		case err == nil && o.State == "completed":
			res.resolvedCompleted++
			return nil
		case err == nil && o.State == "unknown":
			res.resolvedNever++ // the create never happened: no row, and none is expected
			return nil
		case time.Now().After(deadline):
			res.fail("intent %s: outcome still %q (%v) %v after the scenario", in.it.Key, o.State, err, lease+15*time.Second)
			return nil
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// replay sends the intent again as it was, and returns the answer's bytes.
func (e *env) replay(ctx context.Context, in *intent) ([]byte, int, error) {
	for n := 0; ; n++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.replicas[n%2].url+"/v1/demo-requests", bytes.NewReader(in.it.Body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", in.it.Key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode < 500 {
				return body, resp.StatusCode, nil
			}
		}
		if n == 20 {
			return nil, 0, fmt.Errorf("replay of %s: no answer after 20 tries: %v", in.it.Key, err)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// checkOutbox waits for the backlog to drain, then checks that every
// submitted delivery is the desk's one submission for its request.
func (e *env) checkOutbox(ctx context.Context, res *result) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var pending int
		if err := e.db.GetContext(ctx, &pending, `SELECT count(*) FROM outbox WHERE state = 'pending'`); err != nil {
			return err
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			res.fail("%d deliveries still pending 60 s after the scenario", pending)
			break
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	res.deliveries = map[string]int{}
	var states []struct {
		State string `db:"state"`
		N     int    `db:"n"`
	}
	if err := e.db.SelectContext(ctx, &states, `SELECT state, count(*) AS n FROM outbox GROUP BY state`); err != nil {
		return err
	}
	for _, s := range states {
		res.deliveries[s.State] = s.N
	}
	if n := res.deliveries["unknown"] + res.deliveries["failed"]; n > 0 && !res.scenario.deskFault {
		res.fail("%d deliveries unknown or failed although the desk was healthy", n)
	}
	var submitted []struct {
		ID  string `db:"request_id"`
		Ref string `db:"provider_reference"`
	}
	if err := e.db.SelectContext(ctx, &submitted, `SELECT request_id, provider_reference FROM outbox WHERE state = 'submitted'`); err != nil {
		return err
	}
	var held []struct {
		Key string `db:"key"`
		Ref string `db:"reference"`
	}
	if err := e.deskDB.SelectContext(ctx, &held, `SELECT key, reference FROM submissions`); err != nil {
		return err
	}
	desk := map[string]string{}
	for _, h := range held {
		desk[h.Key] = h.Ref
	}
	for _, s := range submitted {
		if ref, ok := desk["demo-request:"+s.ID]; !ok || ref != s.Ref {
			res.fail("request %s is submitted with reference %s, the desk holds %q", s.ID, s.Ref, ref)
		}
	}
	var requests int
	if err := e.db.GetContext(ctx, &requests, `SELECT count(*) FROM demo_requests`); err != nil {
		return err
	}
	if len(held) > requests {
		res.fail("the desk holds %d submissions for %d requests", len(held), requests)
	}
	return nil
}
