package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestReadyzSaysHowCommitsReplicate: /readyz's detail says whether a commit
// waits for a synchronous standby, as the store reads it: a single server
// says it does not.
func TestReadyzSaysHowCommitsReplicate(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, func(d *httpapi.Deps, s *postgres.Store) {
		d.Replication = func() any {
			r, err := s.Replication(context.Background())
			if err != nil {
				t.Errorf("replication: %v", err)
				return nil
			}
			return r
		}
	})
	r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/readyz"})
	var body struct {
		Status      string
		Replication *postgres.Replication
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != http.StatusOK || body.Replication == nil {
		t.Fatalf("/readyz: %d %s", r.Status, r.Body)
	}
	if body.Replication.CommitWaits || body.Replication.Attached != 0 {
		t.Fatalf("/readyz of a single server: %s, want no synchronous standby", r.Body)
	}
}

// TestReadyzSaysWritesWaitForAMissingStandby: commits wait for a
// synchronous standby and none is attached, so every write waits out its
// bound and is answered 503. /readyz stays 200 (reads, replays and the
// outcome route still answer, and every replica shares the fault) but says
// that writes are unavailable, and why.
func TestReadyzSaysWritesWaitForAMissingStandby(t *testing.T) {
	testenv.Long(t, "starts a server of its own")
	t.Parallel()
	pg := pgtest.Own(t, pgtest.Options{Settings: map[string]string{
		"synchronous_standby_names": "absent_standby", "synchronous_commit": "on"}})
	rdb, err := postgres.Open(context.Background(), pg.URL("postgres"), postgres.LongStatements)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	e := testenv.New(t, func(d *httpapi.Deps, _ *postgres.Store) {
		d.Replication = func() any { // the replication of that server, as serve reads it
			r, err := postgres.New(rdb).Replication(context.Background())
			if err != nil {
				t.Errorf("replication: %v", err)
				return nil
			}
			return &r
		}
	})
	r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/readyz"})
	var body struct{ Status, Writes, Detail string }
	if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != http.StatusOK || body.Status != "ready" ||
		body.Writes != "unavailable" || !strings.Contains(body.Detail, "standby") {
		t.Fatalf("/readyz with no synchronous standby attached: %d %s; want 200 ready, writes unavailable, and why", r.Status, r.Body)
	}
}
