package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestOutboxEndToEnd runs the outbox as it runs in production: demo-api
// serve on a real PostgreSQL, its dispatcher handing requests over real
// HTTP to the double of the review desk, which checks every body against
// the desk client's wire types. A create reaches the desk with the topic
// and note it was sent with, and its delivery is submitted; its cancel
// reaches the desk as the cancel of that submission. Every column, field
// and tag between the create's statement and the desk's decoder is on this
// path: a rename on one side that the other does not follow ends here.
func TestOutboxEndToEnd(t *testing.T) {
	url := pgtest.NewURL(t)
	desk := testenv.StartDeskDouble(t)
	p := testenv.Start(t, url, "PROVIDER_URL="+desk.URL)
	db := sqlx.MustOpen("postgres", url)
	defer db.Close()

	resp, body, err := p.Post("key-outbox-e2e")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %s", err, body)
	}
	var created struct {
		RequestID string `json:"requestId"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || created.RequestID == "" {
		t.Fatalf("create: %v %s", err, body)
	}
	id := created.RequestID
	deliveryOf := func() delivery.Status {
		t.Helper()
		resp, b, err := p.Do(http.MethodGet, "/v1/demo-requests/"+id+"/delivery", "")
		var st delivery.Status
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &st) != nil {
			t.Fatalf("GET delivery: %v %s", err, b)
		}
		return st
	}

	if !testenv.Eventually(10*time.Second, func() bool { return deliveryOf().State == delivery.Submitted }) {
		t.Fatalf("the delivery is %+v, want submitted:\n%s", deliveryOf(), p.Log())
	}
	st := deliveryOf()
	_, sent, ok := desk.Submission(delivery.ProviderKey(id))
	want := reviewdesk.Submission{RequestID: id, Topic: "topic-e2e", Note: "note-e2e"}
	if !ok || sent != want {
		t.Fatalf("the desk holds %+v under %s (held: %t), want %+v", sent, delivery.ProviderKey(id), ok, want)
	}
	if rc, _, _ := desk.Submission(st.ProviderKey); st.ProviderReference == nil || *st.ProviderReference != rc.Reference {
		t.Fatalf("the delivery's reference is not the desk's: %+v, desk %+v", st, rc)
	}

	resp, b, err := p.Do(http.MethodPost, "/v1/demo-requests/"+id+"/cancel", "key-outbox-e2e-cancel")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %v %d %s", err, resp.StatusCode, b)
	}
	if !testenv.Eventually(10*time.Second, func() bool {
		c := deliveryOf().Cancel
		return c != nil && c.State == delivery.Submitted
	}) {
		t.Fatalf("the cancel's delivery is %+v, want submitted:\n%s", deliveryOf().Cancel, p.Log())
	}
	if n := desk.Cancels(delivery.EventKey(id, delivery.KindCancel, 1), delivery.ProviderKey(id)); n != 1 {
		t.Fatalf("the desk holds %d cancels of %s under %s, want 1", n, delivery.ProviderKey(id), delivery.EventKey(id, delivery.KindCancel, 1))
	}
	if n, c, bad := desk.Submissions(t), desk.AllCancels(t), desk.Invalid(); n != 1 || c != 1 || bad != 0 {
		t.Fatalf("the desk holds %d submissions and %d cancels and refused %d calls, want 1, 1 and 0", n, c, bad)
	}
	if n := desk.Calls("POST "+reviewdesk.SubmitPath) + desk.Calls("POST "+testenv.DeskRoute(fmt.Sprintf(reviewdesk.CancelPath, id))); n != 2 {
		t.Fatalf("the dispatcher sent %d calls, want the submission and the cancel, once each", n)
	}
	if n := testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE request_id = $1 AND state = 'submitted'`, id); n != 2 {
		t.Fatalf("%d of the request's outbox rows submitted, want its submission and its cancel", n)
	}
}
