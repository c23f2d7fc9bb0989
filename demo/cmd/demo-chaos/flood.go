package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/api/client"
)

// The flood scenario's actor, the flooder: an actor of its own, so that
// its bucket of new keys is not the load's.
const (
	floodToken = "chaos-flood-token-2c9d41"
	floodActor = "chaos-flood"
)

// The flood: floodCreates creates, each with its own key, from
// floodSenders goroutines, no retries, against replicas whose bound on new
// keys per actor is floodRate a second with a burst of floodBurst (each
// replica its own bucket): well below what the replicas can store, so
// that the flood, sent as fast as they answer, meets it. The scenario's
// load runs floodAfter after the heal, so that its intents spread thinly
// enough for its actor never to meet it: a campaign's share of about 700
// intents, with the expedites, is some 30 new keys a second per replica.
const (
	floodCreates = 2500
	floodSenders = 32
	floodRate    = 50
	floodBurst   = 100
	stormSize    = 200 // concurrent requests on one fresh key after the flood
	floodAfter   = 14 * time.Second
)

func init() {
	scenarios = append(scenarios, scenario{name: "flood",
		what: fmt.Sprintf("both replicas restarted with a bound on new keys of %d a second, burst %d, per actor; beside the load, a second actor floods %d creates, each its own key, from %d senders; "+
			"then %d concurrent requests on one fresh key of the flooder, its buckets spent", floodRate, floodBurst, floodCreates, floodSenders, stormSize),
		hold: time.Second, after: floodAfter, prepare: bounded, inject: flood, heal: nothing, judge: judgeFlood})
}

// floodFigures are what the flood and the storm after it saw.
type floodFigures struct {
	sent, created, limited, noRetryAfter int
	others                               map[string]int // any other answer, or none
	elapsed                              time.Duration  // the flood's first send to its last answer
	keys                                 []string       // the flood's keys
	stored, rows                         int            // the flooder's keys and business rows, in SQL
	storm                                map[string]int // the storm's answers
	stormKeys, stormRows                 int
	topic                                string
}

// bounded restarts both replicas with the flood's bound; its restore
// restarts them with the campaign's.
func bounded(ctx context.Context, e *env) (func() error, error) {
	old := [2][]string{}
	restore := func() error {
		var errs []error
		for i, r := range e.replicas {
			r.kill(syscall.SIGTERM)
			r.env = old[i]
			errs = append(errs, e.start(context.WithoutCancel(ctx), r.proc, "/readyz"))
		}
		e.flood = nil
		return errors.Join(errs...)
	}
	for i, r := range e.replicas {
		old[i] = r.env
		r.kill(syscall.SIGTERM)
		r.env = withEnv(r.env, "NEW_KEYS_PER_SECOND="+strconv.Itoa(floodRate), "NEW_KEYS_BURST="+strconv.Itoa(floodBurst))
		if err := e.start(ctx, r.proc, "/readyz"); err != nil {
			return nil, errors.Join(err, restore())
		}
	}
	e.flood = &floodFigures{others: map[string]int{}, storm: map[string]int{}}
	return restore, nil
}

// floodPost sends one create of the flooder to replica r, once, and names
// its answer: its status, or "no answer"; retryAfter is the 429's header.
func (e *env) floodPost(ctx context.Context, r int, it *client.Intent) (status string, retryAfter string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.replicas[r].url+"/v1/demo-requests", bytes.NewReader(it.Body))
	req.Header.Set("Authorization", "Bearer "+floodToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", it.Key)
	resp, err := e.httpClient().Do(req)
	if err != nil {
		return "no answer", ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	status = strconv.Itoa(resp.StatusCode)
	if resp.StatusCode == http.StatusTooManyRequests {
		var p struct{ Code string }
		if json.Unmarshal(body, &p) != nil || p.Code != "rate_limited" {
			status += " " + p.Code
		}
		retryAfter = resp.Header.Get("Retry-After")
	}
	return status, retryAfter
}

// flood sends the flood, then the storm.
func flood(ctx context.Context, e *env) error {
	f := e.flood
	f.topic = fmt.Sprintf("chaos flood %d", time.Now().UnixNano())
	var mu sync.Mutex
	count := func(status, retryAfter string) {
		mu.Lock()
		defer mu.Unlock()
		switch status {
		case "201":
			f.created++
		case "429":
			f.limited++
			if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 {
				f.noRetryAfter++
			}
		default:
			f.others[status]++
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	for range floodSenders {
		wg.Go(func() {
			for n := range next {
				it, _ := client.NewIntent(client.CreateInput{Topic: f.topic, Note: fmt.Sprintf("flood %d", n)})
				mu.Lock()
				f.keys = append(f.keys, it.Key)
				mu.Unlock()
				count(e.floodPost(ctx, n%2, it))
			}
		})
	}
	for n := range floodCreates {
		next <- n
	}
	close(next)
	wg.Wait()
	f.elapsed, f.sent = time.Since(began), floodCreates

	// The storm: the buckets are spent; one token comes back within
	// 1/floodRate. A storm of one key is one new key, whatever its size.
	sleepCtx(ctx, 2*time.Second/floodRate)
	it, _ := client.NewIntent(client.CreateInput{Topic: f.topic, Note: "storm"})
	f.keys = append(f.keys, it.Key)
	start := make(chan struct{})
	for n := range stormSize {
		wg.Go(func() {
			<-start
			status, _ := e.floodPost(ctx, n%2, it)
			mu.Lock()
			f.storm[status]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return nil
}

// judgeFlood checks the flood: it met the bound, every 429 said when to
// retry and stored nothing, what was stored stays within both buckets, and
// the storm of one key met no bound and stored one key and one row. (That
// the load's actor met no 429 is a check of every scenario.)
func judgeFlood(e *env, res *result) {
	f := e.flood
	res.flood = f
	ctx := context.Background()
	if err := e.db.GetContext(ctx, &f.stored, `SELECT count(*) FROM idempotency_keys
		WHERE actor_id = $1 AND operation = $2 AND idem_key = ANY($3)`, floodActor, client.OperationCreate, pq.Array(f.keys)); err != nil {
		res.fail("flood: count its keys: %v", err)
		return
	}
	if err := e.db.GetContext(ctx, &f.rows, `SELECT count(*) FROM demo_requests WHERE actor_id = $1 AND topic = $2`, floodActor, f.topic); err != nil {
		res.fail("flood: count its rows: %v", err)
		return
	}
	if err := e.db.GetContext(ctx, &f.stormRows, `SELECT count(*) FROM demo_requests WHERE actor_id = $1 AND topic = $2 AND note = 'storm'`, floodActor, f.topic); err != nil {
		res.fail("flood: count the storm's rows: %v", err)
		return
	}
	if err := e.db.GetContext(ctx, &f.stormKeys, `SELECT count(*) FROM idempotency_keys
		WHERE actor_id = $1 AND operation = $2 AND idem_key = $3`, floodActor, client.OperationCreate, f.keys[len(f.keys)-1]); err != nil {
		res.fail("flood: count the storm's keys: %v", err)
		return
	}
	bound := int(2 * (floodBurst + floodRate*f.elapsed.Seconds()))
	created := f.created + 1 // and the storm's key
	switch {
	case f.limited == 0:
		res.fail("flood: %d creates in %s met no 429 rate_limited (bound %d/s, burst %d, per replica)", f.sent, f.elapsed.Round(time.Millisecond), floodRate, floodBurst)
	case f.noRetryAfter > 0:
		res.fail("flood: %d of its %d 429s without a Retry-After of a second or more", f.noRetryAfter, f.limited)
	}
	// A create answered otherwise (a 503, no answer) may or may not have
	// been stored; a 429 never is.
	others := 0
	for _, n := range f.others {
		others += n
	}
	if f.stored < created || f.stored > created+others || f.rows != f.stored {
		res.fail("flood: %d keys and %d business rows stored for %d creates answered 201 (and the storm's one), %d answered otherwise (%s)",
			f.stored, f.rows, created, others, counts(f.others))
	}
	if f.created > bound {
		res.fail("flood: %d creates answered 201 in %s, over both buckets' %d", f.created, f.elapsed.Round(time.Millisecond), bound)
	}
	// A request of the storm that meets the first in progress may be
	// answered 409 (the two-phase replica), or 503 when its wait for the
	// first one's row outlasts its deadline: one intent, run once, and
	// never over the bound.
	if f.storm["201"] == 0 || f.storm["201"]+f.storm["409"]+f.storm["503"] != stormSize || f.stormKeys != 1 || f.stormRows != 1 {
		res.fail("flood: the storm of %d requests on one key: answers %s, %d keys, %d business rows (want a 201, then only 201, 409 or 503; one key, one row)", stormSize, counts(f.storm), f.stormKeys, f.stormRows)
	}
}
