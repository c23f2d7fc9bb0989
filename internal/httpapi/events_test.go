package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestCancelAfterAReopen: a request cancelled, reopened (as a service with
// a reopen writes it; the demo has none) and cancelled again under a new
// key: the second cancel answers 200 and queues a cancel of its own, and
// the delivery route shows both, each reaching the desk under its own key.
func TestCancelAfterAReopen(t *testing.T) {
	t.Parallel()
	desk := testenv.StartDeskDouble(t)
	e := testenv.New(t, testenv.WithDesk(desk.URL))
	id := e.Create("key-r1", body1).Request(t).ID
	route := "/v1/demo-requests/" + id
	dispatch := func() {
		t.Helper()
		if _, err := e.Dispatcher.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	dispatch()
	for i, key := range []string{"key-r1-cancel-1", "key-r1-cancel-2"} {
		if i > 0 {
			if _, err := e.DB.Exec(`UPDATE demo_requests SET state = 'accepted', cancelled_at = NULL WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
		}
		if r := e.Must(testenv.Req{Path: route + "/cancel", Token: testenv.TokenAlice, Keys: []string{key}}); r.Status != http.StatusOK {
			t.Fatalf("cancel %d: %d %s, want 200", i+1, r.Status, r.Body)
		}
		dispatch()
	}
	r := e.Must(testenv.Req{Method: http.MethodGet, Path: route + "/delivery", Token: testenv.TokenAlice})
	var st delivery.Status
	if err := json.Unmarshal(r.Body, &st); err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET delivery: %d %s", r.Status, r.Body)
	}
	want := []string{"demo-request:" + id + ":cancel", "demo-request:" + id + ":cancel:2"}
	if len(st.Events) != 2 || st.Cancel == nil || st.Cancel.ProviderKey != want[1] {
		t.Fatalf("GET delivery: %s, want two events, the last as cancel", r.Body)
	}
	for i, c := range st.Events {
		if c.Kind != delivery.KindCancel || c.ProviderKey != want[i] || c.State != delivery.Submitted || desk.Cancels(want[i], "demo-request:"+id) != 1 {
			t.Fatalf("GET delivery: %s; cancel %d: want submitted under %s, held once by the desk", r.Body, i+1, want[i])
		}
	}
}
