package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/demo-api/demo-api/api/client"
	xp "github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/tools/statusmix"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/workshop"
)

// scenario is one fault: inject breaks something while the load runs, heal
// mends it after hold.
type scenario struct {
	name, what   string
	hold         time.Duration
	inject, heal func(ctx context.Context, e *env) error
	deskFault    bool          // the review desk misbehaves: deliveries may end unknown
	work         time.Duration // if set, how long every 4th intent holds its claim (instead of -work)
	expediteTTL  time.Duration // if set, every expedite's key is replayed this long (Workshop-TTL)
	// prepare, if set, readies what the scenario runs against before its
	// load (failover.go: a formation, and the replicas moved onto it), and
	// returns what puts the campaign's own back after its checks.
	prepare func(ctx context.Context, e *env) (restore func() error, err error)
	// judge, if set, checks what the scenario needs beyond the common
	// checks, once its load ended (failover.go).
	judge func(e *env, res *result)
	// lossReported: acknowledged creates may be lost by design (a failover
	// with asynchronous replication): each is counted, and so are its
	// consequences (its retry ran again, its delivery reached the desk),
	// instead of failing the scenario; every other check still holds.
	lossReported bool
	// after, if set, is how long the load goes on after the heal (instead
	// of afterHeal).
	after time.Duration
}

// links sets the database links of both replicas to l.
func links(l pgtest.Link) func(context.Context, *env) error {
	return func(_ context.Context, e *env) error {
		for _, r := range e.replicas {
			r.proxy.Set(l)
		}
		return nil
	}
}

// link sets the database link of replica i to l.
func link(i int, l pgtest.Link) func(context.Context, *env) error {
	return func(_ context.Context, e *env) error {
		e.replicas[i].proxy.Set(l)
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
	{name: "sigkill-replica", what: "SIGKILL replica 2 (two-phase: its claims are left in progress) under load, restart it 2 s later", hold: 2 * time.Second,
		inject: kill(1, syscall.SIGKILL), heal: restart(1)},
	{name: "sigterm-replica", what: "SIGTERM replica 2 (a graceful stop: its claims finish), restart it 2 s later", hold: 2 * time.Second,
		inject: kill(1, syscall.SIGTERM), heal: restart(1)},
	{name: "pg-restart-fast", what: "pg_ctl restart -m fast", hold: 0, inject: pgRestart("fast"), heal: nothing},
	{name: "pg-restart-immediate", what: "pg_ctl restart -m immediate (a crash, then recovery)", hold: 0, inject: pgRestart("immediate"), heal: nothing},
	{name: "pg-restart-held", what: "both links cut and pg_ctl restart -m immediate while two-phase claims are held 1 s: their owners give up with a 503 and their releases fail; the links come back 2 s later",
		hold: 2 * time.Second, work: time.Second,
		inject: func(ctx context.Context, e *env) error {
			links(pgtest.LinkCut)(ctx, e)
			return pgRestart("immediate")(ctx, e)
		}, heal: links(pgtest.LinkUp)},
	{name: "pg-restart-owner-died", what: "SIGKILL replica 2 and pg_ctl restart -m immediate while two-phase claims are held 1 s; restart replica 2 2 s later",
		hold: 2 * time.Second, work: time.Second,
		inject: func(ctx context.Context, e *env) error {
			kill(1, syscall.SIGKILL)(ctx, e)
			return pgRestart("immediate")(ctx, e)
		}, heal: restart(1)},
	{name: "cut-link-3s", what: "both replicas' database links cut for 3 s", hold: 3 * time.Second,
		inject: links(pgtest.LinkCut), heal: links(pgtest.LinkUp)},
	{name: "cut-link-12s", what: "both links cut for 12 s, longer than an intent's 10 s: its client ends in outcome unknown, which the outcome route settles", hold: 12 * time.Second,
		inject: links(pgtest.LinkCut), heal: links(pgtest.LinkUp)},
	{name: "blackhole-5s", what: "both links hold every byte for 5 s", hold: 5 * time.Second,
		inject: links(pgtest.LinkBlackhole), heal: links(pgtest.LinkUp)},
	{name: "blackhole-past-lease", what: "replica 2's link holds every byte for 7 s, longer than the 4 s lease: replica 1 takes over its claims, then its held finishes arrive", hold: 7 * time.Second,
		inject: link(1, pgtest.LinkBlackhole), heal: link(1, pgtest.LinkUp)},
	{name: "mute-then-cut", what: "replies dropped for 2 s (statements run, answers lost), then the links cut for 1 s", hold: 3 * time.Second,
		inject: func(ctx context.Context, e *env) error {
			links(pgtest.LinkMute)(ctx, e)
			time.AfterFunc(2*time.Second, func() { links(pgtest.LinkCut)(ctx, e) })
			return nil
		}, heal: links(pgtest.LinkUp)},
	{name: "kill-dispatcher", what: "the desk holds its answers; SIGKILL replica 1 (a dispatcher) meanwhile, restart it", hold: 2 * time.Second,
		inject: func(ctx context.Context, e *env) error {
			if err := e.deskFaults(`{"holdAnswer":"10s"}`); err != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond) // some submissions are accepted and held
			return kill(0, syscall.SIGKILL)(ctx, e)
		},
		heal: func(ctx context.Context, e *env) error {
			if err := e.deskFaults(`{}`); err != nil {
				return err
			}
			return restart(0)(ctx, e)
		}, deskFault: true},
	{name: "cancel-race", what: "the desk's slots and charges 1 s slow for 6 s while cancels race expedites of the same requests on the other replica",
		hold: 6 * time.Second, inject: desk(`{"delay":"1s","only":["slots","charges"]}`), heal: desk(`{}`)},
	{name: "cancel-desk-down", what: "the desk takes no submission for 4 s: requests cancelled after a failed delivery attempt must never reach it",
		hold: 4 * time.Second, inject: desk(`{"down":true,"only":["submissions"]}`), heal: desk(`{}`), deskFault: true},
	{name: "run-past-ttl", what: "every expedite's key has a 2 s TTL (Workshop-TTL) while the desk takes no slot for 6 s: runs park longer than their TTL, and none may become a new intent",
		hold: 6 * time.Second, expediteTTL: 2 * time.Second, inject: desk(`{"down":true,"only":["slots"]}`), heal: desk(`{}`)},
	{name: "desk-down", what: "the review desk down for 4 s", hold: 4 * time.Second, inject: desk(`{"down":true}`), heal: desk(`{}`), deskFault: true},
	{name: "desk-down-long", what: "the review desk down for 10 s, longer than a delivery's attempts: deliveries end unknown, and are reconciled", hold: 10 * time.Second,
		inject: desk(`{"down":true}`), heal: desk(`{}`), deskFault: true},
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
	during, after statusmix.Mix
	slowest       time.Duration
	healed        atomic.Bool
	samples       []probeSample // every answer, in order of its ask
}

// probeSample is one answer of a probe: when it was asked, and its status
// (0: none in time).
type probeSample struct {
	at, end time.Time
	status  int
}

func (p *probe) record(at time.Time, status int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.during
	if p.healed.Load() {
		m = p.after
	}
	m[status]++
	p.slowest = max(p.slowest, took)
	p.samples = append(p.samples, probeSample{at: at, end: at.Add(took), status: status})
}

func (p *probe) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("during: %s; after: %s; slowest %s", p.during, p.after, p.slowest.Round(time.Millisecond))
}

// result is one scenario's figures and failed checks.
type result struct {
	scenario                           scenario
	intents, created, refused, unknown int
	hops                               int // intents that moved to the other replica
	resolvedCompleted, resolvedNever   int // the unknown ones, as the outcome route settled them
	resolvedLeasePassed                int // in progress with no lease left: sent again, taken over
	duplicates, lostAcks               int
	replaysChecked, replaysIdentical   int
	statuses                           map[string]int
	outcomes                           map[string]int // the replicas' idempotency outcomes of the load's creates, from their logs
	longestBlocked, recovery           time.Duration
	blockedAfterHeal                   [2]time.Duration // owner alive, owner died (tally.afterHeal*)
	readyz, metrics                    *probe
	timeline                           *timeline      // the clients' answers per 100 ms
	deliveries                         map[string]int // this scenario's outbox rows, by state, after the drain
	undelivered                        []string       // the rows that ended unknown or failed: id, state, last error
	reconciled                         int            // of them, submitted after a reconcile
	deskSubmissions                    int            // the desk's submissions for this scenario's requests
	failures                           []string

	topic     string      // of the scenario's intents
	sent      []*intent   // the scenario's intents
	expedites []*expedite // the scenario's expedites (expedite.go)
	// cancelledAlone are the expediters' requests cancelled, not expedited,
	// after their delivery was tried.
	cancelledAlone []string
	ex             expediteFigures

	fo    *failoverFigures // a failover scenario's (failover.go)
	flood *floodFigures    // the flood scenario's (flood.go)
	// With lossReported: the creates whose acknowledgement was lost (by
	// key, with the requestId their client got), those of them whose retry
	// ran the create again, and the failures that follow from a lost one.
	lost          map[string]string
	secondEffects int
	lostDelivered int // their deliveries the desk holds, of requests that no longer exist
	lossEffects   []string
}

func (r *result) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// runScenario runs the load, the fault and the checks of sc, the n-th
// scenario of the campaign; quota is its share of the intents.
func (e *env) runScenario(ctx context.Context, sc scenario, n, quota int, o options) (*result, error) {
	res := &result{scenario: sc, readyz: newProbe(), metrics: newProbe(), timeline: newTimeline(), lost: map[string]string{}}
	if sc.prepare != nil {
		restore, err := sc.prepare(ctx, e)
		if err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
		defer func() {
			if err := restore(); err != nil {
				res.fail("restore the campaign after the scenario: %v", err)
			}
		}()
	}
	t := newTally()
	ans := &answers{m: map[string][]byte{}}
	hc := &http.Client{Transport: recorder{next: e.transport, answers: ans, timeline: res.timeline}}
	workers := make([]*worker, o.workers)
	for i := range workers {
		w, err := newWorker(e, hc, ans, t)
		if err != nil {
			return nil, err
		}
		workers[i] = w
	}
	// The expediters' creates count with the load's; their expedites have
	// a tally and answers of their own, and stay out of the timeline.
	exTally := newTally()
	exAnswers := &answers{m: map[string][]byte{}}
	exHC := &http.Client{Transport: recorder{next: e.transport, answers: exAnswers}}
	// The cancels that race the expedites count apart from both.
	cAnswers := &answers{m: map[string][]byte{}}
	cHC := &http.Client{Transport: recorder{next: e.transport, answers: cAnswers}}
	exps := make([]expediter, expediters)
	for i := range exps {
		var err error
		if exps[i].create, err = newWorker(e, hc, ans, t); err != nil {
			return nil, err
		}
		if exps[i].expedite, err = newWorker(e, exHC, exAnswers, exTally); err != nil {
			return nil, err
		}
		if exps[i].cancel, err = newWorker(e, cHC, cAnswers, nil); err != nil {
			return nil, err
		}
	}
	marks := e.markLogs()
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	for _, r := range e.replicas {
		probes.Go(func() { watch(probeCtx, r.url+"/readyz", res.readyz) })
		probes.Go(func() { watch(probeCtx, r.url+"/metrics", res.metrics) })
	}

	// The load: the quota spread over the timeline (a second before the
	// fault, the fault, two seconds after the heal).
	topic := fmt.Sprintf("chaos %s %d", sc.name, n)
	after := cmp.Or(sc.after, afterHeal)
	pace := newPacer(quota, time.Second+sc.hold+after)
	var mu sync.Mutex
	var intents []*intent
	var healedAt atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			for j := 0; pace.take(ctx); j++ {
				note := fmt.Sprintf("worker %d, intent %d", i, j)
				it, _ := client.NewIntent(client.CreateInput{Topic: topic, Note: note})
				if work := cmp.Or(sc.work, o.work); work > 0 && j%4 == 3 {
					it.Header.Set(workshop.HeaderDelay, work.String())
				}
				in := &intent{it: it, topic: topic, note: note, started: time.Now()}
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
	// The expediters: a create, then its expedite, at most one every
	// expediteEvery each, until the load ends.
	var expedites []*expedite
	var cancelledAlone []string
	stopExpedites := make(chan struct{})
	for i, x := range exps {
		wg.Go(func() {
			tick := time.NewTicker(expediteEvery)
			defer tick.Stop()
			for j := 0; ; j++ {
				select {
				case <-ctx.Done():
					return
				case <-stopExpedites:
					return
				case <-tick.C:
				}
				note := fmt.Sprintf("expediter %d, intent %d", i, j)
				it, _ := client.NewIntent(client.CreateInput{Topic: topic, Note: note})
				in := &intent{it: it, topic: topic, note: note, started: time.Now()}
				x.create.send(ctx, in, (i+j)%2)
				if in.outcome != "unknown" {
					t.answered(it.Key, in.answered)
				}
				mu.Lock()
				intents = append(intents, in)
				mu.Unlock()
				if in.outcome != "created" {
					continue // an unknown create is the checks' to settle; it has no expedite
				}
				if j%4 == 3 {
					// Every fourth request is only cancelled, once its
					// delivery was tried (and, with the desk down, failed).
					cit, err := client.NewCancelIntent(in.requestID)
					if err != nil {
						continue
					}
					sleepCtx(ctx, 300*time.Millisecond)
					x.cancel.send(ctx, &intent{it: cit, topic: topic, note: note, started: time.Now()}, (i+j)%2)
					mu.Lock()
					cancelledAlone = append(cancelledAlone, in.requestID)
					mu.Unlock()
					continue
				}
				xit, err := xp.NewIntent(in.requestID)
				if err != nil {
					continue
				}
				if sc.expediteTTL > 0 {
					xit.Header.Set(workshop.HeaderTTL, sc.expediteTTL.String())
				}
				xin := &expedite{intent: &intent{it: xit, topic: topic, note: note, started: time.Now()}, requestID: in.requestID}
				// Every fourth request is also cancelled at the same moment,
				// on the other replica: the rule between the two decides.
				var race sync.WaitGroup
				if cit, err := client.NewCancelIntent(in.requestID); err == nil && j%4 == 1 {
					xin.cancel = &intent{it: cit, topic: topic, note: note, started: time.Now()}
					race.Go(func() { x.cancel.send(ctx, xin.cancel, (i+j)%2) })
				}
				x.expedite.send(ctx, xin.intent, (i+j+1)%2)
				race.Wait()
				xin.unknown = xin.outcome == "unknown"
				if !xin.unknown {
					exTally.answered(xit.Key, xin.answered)
				}
				mu.Lock()
				expedites = append(expedites, xin)
				mu.Unlock()
			}
		})
	}

	sleepCtx(ctx, time.Second)
	res.timeline.mark(&res.timeline.injected)
	err := sc.inject(ctx, e)
	if err == nil {
		sleepCtx(ctx, sc.hold)
		err = sc.heal(ctx, e)
		res.timeline.mark(&res.timeline.healed)
		now := time.Now()
		healedAt.Store(&now)
		t.heal(now)
		exTally.heal(now)
		res.readyz.healed.Store(true)
		res.metrics.healed.Store(true)
		sleepCtx(ctx, after)
	}
	pace.end()
	close(stopExpedites)
	wg.Wait()
	stopProbes()
	probes.Wait()
	if err != nil {
		return nil, fmt.Errorf("inject or heal: %w", err)
	}
	if sc.judge != nil {
		sc.judge(e, res)
	}
	res.statuses, res.longestBlocked = t.statuses, t.blocked
	res.blockedAfterHeal = [2]time.Duration{t.afterHealAlive, t.afterHealDied}
	res.ex.blockedAfterHeal = [2]time.Duration{exTally.afterHealAlive, exTally.afterHealDied}
	if res.outcomes, err = e.outcomesSince(marks); err != nil {
		return nil, fmt.Errorf("read the replicas' logs: %w", err)
	}
	settler, err := e.settler()
	if err != nil {
		return nil, err
	}
	res.topic, res.sent, res.expedites, res.ex.statuses = topic, intents, expedites, exTally.statuses
	res.cancelledAlone = cancelledAlone
	if err := e.check(ctx, res, topic, intents, settler); err != nil {
		return res, err
	}
	if sc.lossReported {
		res.setLossEffectsApart()
	}
	return res, nil
}

// setLossEffectsApart moves the failures that name a create whose
// acknowledgement was lost (its key or its request) from the failures to
// the loss's effects: with lossReported they are what the loss costs,
// counted and reported, not a broken promise of the service.
func (r *result) setLossEffectsApart() {
	if len(r.lost) == 0 {
		return
	}
	var kept []string
	for _, f := range r.failures {
		effect := false
		for key, id := range r.lost {
			if strings.Contains(f, key) || strings.Contains(f, id) {
				effect = true
				break
			}
		}
		if effect {
			r.lossEffects = append(r.lossEffects, f)
		} else {
			kept = append(kept, f)
		}
	}
	r.failures = kept
}

// settler is a worker for the checks: it sends again an intent that
// never happened, counting nothing.
func (e *env) settler() (*worker, error) {
	// It records the answers it gets, as the load's workers do: the checks
	// compare what its client got with what the key stores.
	ans := &answers{m: map[string][]byte{}}
	return newWorker(e, &http.Client{Transport: recorder{next: e.transport, answers: ans}}, ans, nil)
}

// afterHeal is how long the load goes on after the heal.
const afterHeal = 2 * time.Second

func newProbe() *probe { return &probe{during: statusmix.Mix{}, after: statusmix.Mix{}} }

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
		p.record(start, status, time.Since(start))
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
