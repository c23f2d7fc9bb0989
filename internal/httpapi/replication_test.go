package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/apitest"
)

// TestReadyzSaysHowCommitsReplicate: /readyz's detail says whether a commit
// waits for a synchronous standby, as the store reads it: a single server
// says it does not.
func TestReadyzSaysHowCommitsReplicate(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, func(d *httpapi.Deps, s *postgres.Store) {
		d.Replication = func() any {
			r, err := s.Replication(context.Background())
			if err != nil {
				t.Errorf("replication: %v", err)
				return nil
			}
			return r
		}
	})
	r := e.Must(apitest.Req{Method: http.MethodGet, Path: "/readyz"})
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
