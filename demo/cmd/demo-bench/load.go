package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/demo/internal/tools/statusmix"
)

// Scenario names.
const (
	scBaseline = "baseline"
	scOutbox   = "baseline+outbox" // the baseline that also writes the outbox row: the create's business effect
	scKeyRow   = "baseline+key"    // and, first, the key row with its answer, plainly: what a create must write
	scCreate   = "create"          // the one-phase path, as the service runs a create
	scCreate2P = "create-2p"       // the same create on the two-phase path (IDEMPOTENCY_PATH=two_phase)
	scReplay   = "replay"          // the same request again with a completed key, no X-Client-Attempt
	scReplayA2 = "replay-a2"       // the same, sent as a retry says it is one: X-Client-Attempt: 2
	scRead     = "read"            // GET /v1/demo-requests/{id}: the read floor a replay should approach
)

// scenarios are every scenario, in the order the report lists them.
var scenarios = []string{scBaseline, scOutbox, scKeyRow, scCreate, scCreate2P, scReplay, scReplayA2, scRead}

// The bodies: the same size for the create and the baseline; the topic tells
// their rows apart.
var (
	createBody   = []byte(`{"topic":"bench-create","note":"a demo request filed by the load generator"}`)
	baselineBody = []byte(`{"topic":"bench-insert","note":"a demo request filed by the load generator"}`)
	outboxBody   = []byte(`{"topic":"bench-outbox","note":"a demo request filed by the load generator"}`)
	keyRowBody   = []byte(`{"topic":"bench-keyrow","note":"a demo request filed by the load generator"}`)
)

// client sends the benchmark's requests: creates, replays and storms to
// demo-api, baseline requests to the baseline servers, all as actor "bench".
type client struct {
	api, baseline *serverProc
	outbox        *serverProc // the baseline server with BASELINE_OUTBOX=true
	keyRow        *serverProc // the baseline server with BASELINE_KEY=true
	twoPhase      *serverProc // demo-api with IDEMPOTENCY_PATH=two_phase
	token         string
	hc            *http.Client

	created, inserted, effected, keyed atomic.Int64 // 201s of creates (first ones) and of the baselines

	mu   sync.Mutex
	pool []created // completed creates, replayed and read by the replay and read scenarios
}

// created is a completed create: its key, and the URL of its request.
type created struct{ key, location string }

func newClient(api, twoPhase, baseline, outbox, keyRow *serverProc, token string, maxConns int) *client {
	tr := &http.Transport{
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &client{api: api, twoPhase: twoPhase, baseline: baseline, outbox: outbox, keyRow: keyRow, token: token, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// reply is what the benchmark keeps of a response.
type reply struct {
	status   int
	replayed bool
	location string
	err      error
	latency  time.Duration
}

// post sends a create body to POST /v1/demo-requests of srv, with key
// unless it is empty, and with X-Client-Attempt if attempt > 0.
func (c *client) post(ctx context.Context, srv *serverProc, key string, attempt int, body []byte) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.base+"/v1/demo-requests", bytes.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if attempt > 0 {
		req.Header.Set("X-Client-Attempt", strconv.Itoa(attempt))
	}
	return c.do(req)
}

// get reads the request at path (its Location) from srv.
func (c *client) get(ctx context.Context, srv *serverProc, path string) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.base+path, nil)
	if err != nil {
		return reply{err: err}
	}
	return c.do(req)
}

// do sends req as actor "bench" and reads the whole answer.
func (c *client) do(req *http.Request) reply {
	req.Header.Set("Authorization", "Bearer "+c.token)
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return reply{err: err, latency: time.Since(start)}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", location: resp.Header.Get("Location"),
		err: err, latency: time.Since(start)}
}

// newKey is a fresh Idempotency-Key, made as api/client makes one: a random
// UUID, so that the key table's index takes the keys where real clients put
// them (spread over its pages), not in the order of a counter.
func (c *client) newKey() string {
	return uuid.NewString()
}

// request is one request of a scenario for worker w, its i-th; ok says
// whether its reply is the expected one.
type request func(ctx context.Context, w, i int) (reply, bool)

// scenario returns the request function of a scenario, and a function to
// call once the phase is over (it publishes created keys to the pool).
func (c *client) scenario(name string, workers int) (request, func()) {
	switch name {
	case scBaseline, scOutbox, scKeyRow:
		srv, body, sent := c.baseline, baselineBody, &c.inserted
		switch name {
		case scOutbox:
			srv, body, sent = c.outbox, outboxBody, &c.effected
		case scKeyRow:
			srv, body, sent = c.keyRow, keyRowBody, &c.keyed
		}
		return func(ctx context.Context, w, i int) (reply, bool) {
			r := c.post(ctx, srv, "", 0, body)
			ok := r.err == nil && r.status == http.StatusCreated
			if ok {
				sent.Add(1)
			}
			return r, ok
		}, func() {}
	case scCreate, scCreate2P:
		srv := c.api
		if name == scCreate2P {
			srv = c.twoPhase
		}
		made := make([][]created, workers)
		return func(ctx context.Context, w, i int) (reply, bool) {
				key := c.newKey()
				r := c.post(ctx, srv, key, 0, createBody)
				ok := r.err == nil && r.status == http.StatusCreated && !r.replayed && r.location != ""
				if ok {
					c.created.Add(1)
					made[w] = append(made[w], created{key, r.location})
				}
				return r, ok
			}, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, m := range made {
					c.pool = append(c.pool, m...)
				}
			}
	case scReplay, scReplayA2, scRead:
		c.mu.Lock()
		pool := slices.Clone(c.pool)
		c.mu.Unlock()
		attempt := 0
		if name == scReplayA2 {
			attempt = 2
		}
		return func(ctx context.Context, w, i int) (reply, bool) {
			// Worker w takes creates w, w+workers, … of the pool, cycling.
			cr := pool[(w+i*workers)%len(pool)]
			if name == scRead {
				r := c.get(ctx, c.api, cr.location)
				return r, r.err == nil && r.status == http.StatusOK
			}
			r := c.post(ctx, c.api, cr.key, attempt, createBody)
			return r, r.err == nil && r.status == http.StatusCreated && r.replayed
		}, func() {}
	}
	panic("unknown scenario " + name)
}

// loadResult is one closed-loop run.
type loadResult struct {
	n, errors int
	statuses  statusmix.Mix // 0: transport error
	elapsed   time.Duration
	latencies []time.Duration // sorted
	firstErr  string
}

func (r loadResult) rps() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r loadResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(q*float64(len(r.latencies))+0.5) - 1
	return r.latencies[min(max(i, 0), len(r.latencies)-1)]
}

// closedLoop runs workers that each send one request after the other, until
// d has passed (if d > 0) or each sent count requests (if count > 0).
func closedLoop(ctx context.Context, workers int, d time.Duration, count int, req request) loadResult {
	type workerResult struct {
		lat      []time.Duration
		errors   int
		statuses statusmix.Mix
		firstErr string
	}
	results := make([]workerResult, workers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			res := workerResult{statuses: statusmix.Mix{}}
			for i := 0; ctx.Err() == nil; i++ {
				if (d > 0 && !time.Now().Before(deadline)) || (count > 0 && i >= count) {
					break
				}
				r, ok := req(ctx, w, i)
				res.lat = append(res.lat, r.latency)
				res.statuses[r.status]++ // 0: transport error
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
	wg.Wait()
	out := loadResult{elapsed: time.Since(start), statuses: statusmix.Mix{}}
	for _, res := range results {
		out.latencies = append(out.latencies, res.lat...)
		out.errors += res.errors
		out.statuses.Add(res.statuses)
		if out.firstErr == "" {
			out.firstErr = res.firstErr
		}
	}
	out.n = len(out.latencies)
	slices.Sort(out.latencies)
	return out
}

func describe(r reply) string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("status %d (replayed %v)", r.status, r.replayed)
}

// stormResult is one same-key storm.
type stormResult struct {
	key, note                              string
	first, replayed, conflict, s5xx, other int
	rows                                   int // business rows of the key
	elapsed                                time.Duration
	p50, p99                               time.Duration
	firstOther                             string
}

// storm sends n requests with one fresh key and one body at once: n
// goroutines, each with its request built and (as far as the pool allows) a
// connection open, released together.
func (c *client) storm(ctx context.Context, n int) stormResult {
	c.warmConnections(ctx, n)
	res := stormResult{key: c.newKey(), note: "storm " + randHex(8)}
	body := []byte(fmt.Sprintf(`{"topic":"bench-storm","note":%q}`, res.note))
	replies := make([]reply, n)
	release := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-release
			replies[i] = c.post(ctx, c.api, res.key, 0, body)
		})
	}
	ready.Wait()
	start := time.Now()
	close(release)
	done.Wait()
	res.elapsed = time.Since(start)
	lat := make([]time.Duration, 0, n)
	for _, r := range replies {
		lat = append(lat, r.latency)
		switch {
		case r.err == nil && r.status == http.StatusCreated && !r.replayed:
			res.first++
		case r.err == nil && r.status == http.StatusCreated:
			res.replayed++
		case r.err == nil && r.status == http.StatusConflict:
			res.conflict++
		case r.err == nil && r.status >= 500:
			res.s5xx++
			if res.firstOther == "" {
				res.firstOther = describe(r)
			}
		default:
			res.other++
			if res.firstOther == "" {
				res.firstOther = describe(r)
			}
		}
	}
	slices.Sort(lat)
	lr := loadResult{latencies: lat}
	res.p50, res.p99 = lr.quantile(0.50), lr.quantile(0.99)
	return res
}

// warmConnections opens up to n keep-alive connections (concurrent GET
// /healthz), so a storm measures requests rather than TCP handshakes.
func (c *client) warmConnections(ctx context.Context, n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-release
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.api.base+"/healthz", nil)
			if resp, err := c.hc.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	close(release)
	wg.Wait()
}
