package room_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/room"
	"github.com/demo-api/demo-api/demo/internal/tools/demotest"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) { demotest.Main(m) }

const body1 = `{"topic":"topic-billing","note":"note-call me"}`

// inRoom makes a workshop room: the workshop knobs, and any dev-<name> the
// participant dev-<name>.
func inRoom(d *httpapi.Deps, s *postgres.Store) {
	testenv.WithWorkshop()(d, s)
	d.Authenticate = room.Authenticate
}

// TestRoomParticipants: in a workshop room each dev-<name> is a scope of
// its own, the same keys included; a token that is not dev-<name> with a
// valid name is 401, and without the room dev-<name> is just an unknown
// token.
func TestRoomParticipants(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, inRoom)
	ids := map[string]bool{}
	for _, name := range []string{"ana", "ben", "c.d_e-9"} {
		r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: "dev-" + name, Keys: []string{"order-42"}, Body: body1})
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%s's first use of order-42: %d %s, want a first 201", name, r.Status, r.Body)
		}
		ids[r.Request(t).ID] = true
		again := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: "dev-" + name, Keys: []string{"order-42"}, Body: body1})
		if again.Header.Get("Idempotent-Replayed") != "true" || again.Request(t).ID != r.Request(t).ID {
			t.Fatalf("%s's retry: %d %s, want the replay of their own", name, again.Status, again.Body)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d requests for three participants, want 3", len(ids))
	}
	if n := e.Count(`SELECT count(DISTINCT actor_id) FROM demo_requests WHERE actor_id IN ('dev-ana', 'dev-ben', 'dev-c.d_e-9')`); n != 3 {
		t.Fatalf("%d actors hold the rows, want the 3 participants", n)
	}
	// The configured tokens still work, beside the room's.
	if r := e.Create("order-42", body1); r.Status != http.StatusCreated {
		t.Fatalf("alice's own token in a room: %d %s", r.Status, r.Body)
	}
	for _, token := range []string{"dev-", "dev-Ana", "dev-a b", "dev-" + strings.Repeat("x", 33), "ana", "dev-.x"} {
		r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: token, Keys: []string{"k"}, Body: body1})
		if r.Status != http.StatusUnauthorized || r.Problem(t) != apperr.Unauthorized {
			t.Fatalf("token %q in a room: %d %s, want 401", token, r.Status, r.Body)
		}
		// The 401 says what a participant's token must be (an uppercase
		// login, say, is not a name).
		var p struct{ Detail string }
		if json.Unmarshal(r.Body, &p) != nil || !strings.Contains(p.Detail, room.NameRule) {
			t.Fatalf("token %q in a room: the 401 %s does not state the rule of the names", token, r.Body)
		}
	}
	off := testenv.New(t, testenv.WithWorkshop())
	if r := off.Must(testenv.Req{Path: "/v1/demo-requests", Token: "dev-ana", Keys: []string{"k"}, Body: body1}); r.Status != http.StatusUnauthorized {
		t.Fatalf("dev-ana without the room: %d %s, want 401", r.Status, r.Body)
	}
}

// TestRoomParticipantsAreNotConfiguredActors: in a room beside configured
// actors (alice and u1, each with a secret token), the tokens dev-alice and
// dev-u1 are participants of their own: they neither read nor cancel what
// alice and u1 made, and their keys are theirs. A configured actor named
// as a participant is refused at start, and a room needs no configured
// token at all.
func TestRoomParticipantsAreNotConfiguredActors(t *testing.T) {
	t.Parallel()
	const tokenU1 = "tok-u1-90d2"
	e := testenv.New(t, inRoom, func(d *httpapi.Deps, _ *postgres.Store) {
		d.Tokens[auth.Hash(tokenU1)] = "u1"
	})
	for _, owner := range []struct{ token, participant string }{{testenv.TokenAlice, "dev-alice"}, {tokenU1, "dev-u1"}} {
		made := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: owner.token, Keys: []string{"same-key"}, Body: body1})
		if made.Status != http.StatusCreated {
			t.Fatalf("create with %s's own token: %d %s", owner.participant, made.Status, made.Body)
		}
		id := made.Request(t).ID
		if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + id, Token: owner.participant}); r.Status != http.StatusNotFound {
			t.Fatalf("%s reads the configured actor's request: %d %s, want 404", owner.participant, r.Status, r.Body)
		}
		if r := e.Must(testenv.Req{Path: "/v1/demo-requests/" + id + "/cancel", Token: owner.participant, Keys: []string{"c-1"}}); r.Status != http.StatusNotFound {
			t.Fatalf("%s cancels the configured actor's request: %d %s, want 404", owner.participant, r.Status, r.Body)
		}
		if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/same-key?operation=demo-requests.create", Token: owner.participant}); r.Status != http.StatusNotFound {
			t.Fatalf("%s reads the configured actor's key: %d %s, want 404", owner.participant, r.Status, r.Body)
		}
		mine := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: owner.participant, Keys: []string{"same-key"}, Body: body1})
		if mine.Status != http.StatusCreated || mine.Header.Get("Idempotent-Replayed") != "" || mine.Request(t).ID == id {
			t.Fatalf("%s's own use of the key: %d %s, want a first 201 of its own", owner.participant, mine.Status, mine.Body)
		}
		if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + id, Token: owner.token}); r.Status != http.StatusOK || r.Request(t).State != demo.StateAccepted {
			t.Fatalf("the configured actor's request after the participant's tries: %d %s, want 200, accepted", r.Status, r.Body)
		}
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests WHERE actor_id IN ('alice', 'u1')`); n != 2 {
		t.Fatalf("%d requests of alice and u1, want 2", n)
	}

	base := httpapi.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Demo: &demo.Service{Store: e.Store}, Writes: e.Store,
		Keys: e.Store, Ready: e.Store.Ping, TTL: testenv.TTL, Lease: testenv.Lease, Workshop: true, Authenticate: room.Authenticate}
	if _, err := room.Open(true, auth.Tokens{auth.Hash("s3cret"): "dev-ana"}); err == nil || !strings.Contains(err.Error(), `"dev-ana"`) {
		t.Fatalf("a room beside a configured actor dev-ana: %v, want refused, naming it", err)
	}
	if _, err := httpapi.NewServer(base); err != nil {
		t.Fatalf("a room without configured tokens: %v, want served", err)
	}
}
