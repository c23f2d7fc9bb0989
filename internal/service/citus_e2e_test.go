//go:build citus

// The tests of make test-citus that only a Citus cluster can run: the
// service on a coordinator and two workers (scripts/citus.sh), a storm on
// one key, and a worker stopped under load. With the citus tag and no
// Citus coordinator in TEST_DATABASE_URL they fail: they never skip.
package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// citusScript is scripts/citus.sh, which stops and starts a worker.
const citusScript = "../../scripts/citus.sh"

// onCitus fails the test unless its database is a Citus coordinator whose
// three tables are distributed by actor, co-located.
func onCitus(t *testing.T, db *sqlx.DB) {
	t.Helper()
	if !pgtest.Citus() {
		t.Fatal("the citus tests need TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	var n, groups int
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT colocationid) FROM pg_dist_partition
		WHERE logicalrelid IN ('idempotency_keys'::regclass, 'demo_requests'::regclass, 'outbox'::regclass)
		  AND column_to_column_name(logicalrelid, partkey) = 'actor_id'`).Scan(&n, &groups); err != nil {
		t.Fatal(err)
	}
	if n != 3 || groups != 1 {
		t.Fatalf("%d of the 3 tables distributed by actor_id, in %d co-location groups: want 3 in 1", n, groups)
	}
}

// TestCitusStormOnOneKey: 500 concurrent creates of one key, released
// together, on the cluster: one business row, one key row, one outbox row,
// every 201 the same answer, and the others 409 in progress or 503 with
// Retry-After (a statement that waited past its bound behind the first).
func TestCitusStormOnOneKey(t *testing.T) {
	base, db := testenv.ServeInProcess(t, run)
	onCitus(t, db)
	const n = 500
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		statuses = map[int]int{}
		bodies   = map[string]int{}
	)
	for range n {
		wg.Go(func() {
			<-start
			resp, body, err := testenv.PostCreate(context.Background(), base, testenv.TokenAlice, "storm-500",
				`{"topic":"storm","note":"one key"}`)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[-1]++
				return
			}
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				statuses[-2]++ // a 503 without Retry-After
			}
			if resp.StatusCode == http.StatusCreated {
				bodies[string(body)]++
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("500 requests on one key: statuses %v", statuses)
	if statuses[http.StatusCreated] == 0 || len(bodies) != 1 || statuses[-2] > 0 ||
		statuses[http.StatusCreated]+statuses[http.StatusConflict]+statuses[http.StatusServiceUnavailable] != n {
		t.Fatalf("statuses %v (-2: a 503 without Retry-After), %d distinct 201 bodies: want 201s (one body), 409s and 503s with Retry-After only", statuses, len(bodies))
	}
	for table, want := range map[string]int{"demo_requests": 1, "idempotency_keys": 1, "outbox": 1} {
		if got := testenv.Count(t, db, "SELECT count(*) FROM "+table); got != want {
			t.Errorf("%d rows in %s after the storm, want %d", got, table, want)
		}
	}
}

// TestCitusReplicasStartTogether: two replicas start at once, three times,
// on one schema: what every start of serve runs against the database
// (migrateUp: the migrations, then the distribution and the functions) runs
// in both together. Each waits for the other, and neither fails.
func TestCitusReplicasStartTogether(t *testing.T) {
	url := pgtest.NewURL(t) // a schema, migrated and distributed
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				db, err := postgres.Open(context.Background(), url, postgres.LongStatements)
				if err != nil {
					errs[i] = err
					return
				}
				defer db.Close()
				_, errs[i] = migrateUp(context.Background(), db)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, replica %d: %v", round+1, i+1, err)
			}
		}
	}
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	onCitus(t, db)
}

// answer is one create under load: whose, which key, what came back and
// how long it took.
type answer struct {
	actor, key string
	at         time.Time
	took       time.Duration
	status     int
	retryAfter string
	id         string
	err        error
}

// TestCitusWorkerDown stops one worker while two actors, one on each
// worker, create under load, once a fast stop and once an immediate one (a
// crash of its server): the stopped worker's actor gets 503 with
// Retry-After within 3 s, the other is served throughout, and once the
// worker is back every key answered 201 is there with the request the
// client was told (asked again, it is replayed), every key retried after
// its 503 has exactly one business row, and the desk holds one submission
// for each. make test-citus runs it last, alone: the worker it stops holds
// the other tests' shards too.
func TestCitusWorkerDown(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) { workerDown(t, mode) })
	}
}

// workerDown is TestCitusWorkerDown with the worker stopped in mode.
func workerDown(t *testing.T, mode string) {
	tokens := map[string]string{}
	var list []string
	for i := range 16 {
		actor := fmt.Sprintf("actor-%02d", i)
		tokens[actor] = "tok-" + actor
		list = append(list, actor+":"+auth.Hash(tokens[actor]))
	}
	// The load is the workers', not the bound on new keys; the dispatcher
	// hands every request to the desk as it goes.
	desk := testenv.StartDeskDouble(t)
	base, db := testenv.ServeInProcess(t, run, "API_TOKENS="+strings.Join(list, ","),
		"NEW_KEYS_PER_SECOND=100000", "NEW_KEYS_BURST=100000", "PROVIDER_URL="+desk.URL)
	onCitus(t, db)

	// The workers by port (worker1 first, as scripts/citus.sh numbers
	// them), and an actor whose shard is on each.
	var ports []int
	if err := db.Select(&ports, `SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 ORDER BY nodeport`); err != nil || len(ports) != 2 {
		t.Fatalf("the workers: %v %v", ports, err)
	}
	onWorker := map[int]string{}
	for actor := range tokens {
		var port int
		if err := db.Get(&port, `SELECT nodeport FROM pg_dist_shard_placement
			WHERE shardid = get_shard_id_for_distribution_column('idempotency_keys', $1::text)`, actor); err != nil {
			t.Fatal(err)
		}
		if onWorker[port] == "" || actor < onWorker[port] {
			onWorker[port] = actor
		}
	}
	down, up := onWorker[ports[0]], onWorker[ports[1]]
	if down == "" || up == "" {
		t.Fatalf("no actor on each worker: %v", onWorker)
	}
	t.Logf("%s's shard is on worker1 (port %d), stopped; %s's on worker2 (port %d)", down, ports[0], up, ports[1])
	worker := func(cmd ...string) {
		t.Helper()
		out, err := exec.Command(citusScript, cmd...).CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/citus.sh %v: %v\n%s", cmd, err, out)
		}
	}
	t.Cleanup(func() { exec.Command(citusScript, "start", "worker1").Run() }) // back, whatever happened

	create := func(actor, key string) answer {
		a := answer{actor: actor, key: key, at: time.Now()}
		resp, body, err := testenv.PostCreate(context.Background(), base, tokens[actor], key, `{"topic":"down","note":"`+actor+`"}`)
		a.took, a.err = time.Since(a.at), err
		if err == nil {
			a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			var created struct {
				RequestID string `json:"requestId"`
			}
			if json.Unmarshal(body, &created) == nil {
				a.id = created.RequestID
			}
		}
		return a
	}
	var (
		mu      sync.Mutex
		answers []answer
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	// Warm first: the service's connections to the coordinator, and the
	// coordinator's to each worker (a cold one took 1-4 s here), until a
	// round of the load's size is answered 201 at once. Its keys are
	// checked at the end with the others'.
	var warm []answer
	for round := 0; ; round++ {
		var ok sync.WaitGroup
		var roundAnswers []answer
		for _, actor := range []string{down, up} {
			for c := range 4 {
				ok.Go(func() {
					a := create(actor, fmt.Sprintf("%s-warm%d-c%d", actor, round, c))
					mu.Lock()
					roundAnswers = append(roundAnswers, a)
					mu.Unlock()
				})
			}
		}
		ok.Wait()
		warm = append(warm, roundAnswers...)
		fast := true
		for _, a := range roundAnswers {
			fast = fast && a.status == http.StatusCreated && a.took < time.Second
		}
		if fast {
			break
		}
		if round == 30 {
			t.Fatalf("the service did not answer a round of creates at once in %d rounds: %+v", round+1, roundAnswers)
		}
	}
	for _, actor := range []string{down, up} {
		for c := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a := create(actor, fmt.Sprintf("%s-c%d-%d", actor, c, i))
					mu.Lock()
					answers = append(answers, a)
					mu.Unlock()
				}
			})
		}
	}
	time.Sleep(time.Second)
	worker("stop", "worker1", mode)
	stopped := time.Now()
	time.Sleep(6 * time.Second)
	restarting := time.Now()
	worker("start", "worker1")
	// Until worker1's actor is served again (its coordinator connections
	// reopen), 20 s at most.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		back := slices.ContainsFunc(answers, func(a answer) bool {
			return a.actor == down && a.at.After(restarting) && a.status == http.StatusCreated
		})
		mu.Unlock()
		if back {
			break
		}
	}
	close(stop)
	wg.Wait()

	var downServed, downRefused, upServed, upRefused, after int
	for _, a := range answers {
		if a.err != nil {
			t.Errorf("%s %s: %v", a.actor, a.key, a.err)
			continue
		}
		while := a.at.After(stopped) && a.at.Add(a.took).Before(restarting)
		switch {
		case a.actor == up && a.status == http.StatusCreated:
			upServed++
		case a.actor == up:
			upRefused++
			t.Errorf("%s (worker2) got %d at %s", a.actor, a.status, a.at.Sub(stopped))
		case while && a.status == http.StatusServiceUnavailable:
			downRefused++
			if a.retryAfter == "" || a.took > 3*time.Second {
				t.Errorf("%s (worker1 down): 503 after %s, Retry-After %q: want within 3 s, with Retry-After", a.actor, a.took, a.retryAfter)
			}
		case while:
			t.Errorf("%s (worker1 down) got %d after %s", a.actor, a.status, a.took)
		case a.status == http.StatusCreated:
			downServed++
			if a.at.After(restarting) {
				after++
			}
		}
	}
	t.Logf("%s (worker2): %d served, %d refused; %s (worker1): %d served (%d after its restart), %d refused with 503 while down",
		up, upServed, upRefused, down, downServed, after, downRefused)
	if downRefused == 0 || after == 0 || upServed == 0 {
		t.Fatalf("want 503s while worker1 was down and 201s for %s after: %d, %d; and %s served: %d", down, downRefused, after, up, upServed)
	}

	// Every key is asked again, as a client whose answer was lost would:
	// one answered 201 is replayed, with the request the client was told
	// (a commit acknowledged and lost would make a new one); one that did
	// not get a 201 is created now, once.
	want := map[string]string{} // key → request id
	for _, a := range append(warm, answers...) {
		again := create(a.actor, a.key)
		if again.status != http.StatusCreated {
			t.Errorf("%s %s asked again: %d %v", a.actor, a.key, again.status, again.err)
			continue
		}
		if a.status == http.StatusCreated && again.id != a.id {
			t.Errorf("%s %s: acknowledged with request %s, asked again %s: the acknowledged create was lost", a.actor, a.key, a.id, again.id)
		}
		want[a.key] = again.id
	}
	var rows []struct {
		Key string `db:"idem_key"`
		ID  string `db:"id"`
	}
	if err := db.Select(&rows, `SELECT k.idem_key, r.id FROM idempotency_keys k
		JOIN demo_requests r ON r.actor_id = k.actor_id AND r.id::text = k.result_id`); err != nil {
		t.Fatal(err)
	}
	if n := testenv.Count(t, db, `SELECT count(*) FROM demo_requests`); n != len(want) || len(rows) != len(want) {
		t.Errorf("%d business rows, %d keys with their row, for %d keys created: want one each", n, len(rows), len(want))
	}
	for _, r := range rows {
		if id, ok := want[r.Key]; !ok || id != r.ID {
			t.Errorf("key %s has request %s in the database, the client was told %q", r.Key, r.ID, id)
		}
	}
	// One submission at the desk for each intent, once the dispatcher has
	// handed them all over.
	if !testenv.Eventually(60*time.Second, func() bool {
		return testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
	}) {
		t.Fatal("deliveries still pending 60 s after the load")
	}
	if n := desk.Submissions(t); n != len(want) {
		t.Errorf("the desk holds %d submissions for %d intents, want one each", n, len(want))
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "worker down (%s stop): %d answers, %d keys, %d submissions at the desk\n", mode, len(answers), len(want), desk.Submissions(t))
	}
}
