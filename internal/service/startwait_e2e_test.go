package service

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestServeWaitsForItsDatabase: a database that does not answer at start
// (a link that holds every byte for 4 s, longer than a read's bound, as a
// database slow under load or restarting does) is waited for, and serve
// starts once it answers.
func TestServeWaitsForItsDatabase(t *testing.T) {
	testenv.Long(t, "starts the server process")
	dbURL, proxy := pgtest.Proxied(t, pgtest.NewURL(t))
	proxy.Set(pgtest.LinkBlackhole)
	up := time.AfterFunc(4*time.Second, func() { proxy.Set(pgtest.LinkUp) })
	defer up.Stop()

	p := testenv.Start(t, dbURL)
	if !strings.Contains(p.Log(), `"msg":"the database does not answer yet; trying again"`) {
		t.Fatalf("serve started without waiting for its database:\n%s", p.Log())
	}
	if resp, body, err := p.Post("key-after-wait"); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("a create once the database answers: %v %s", err, body)
	}
}

// TestServeStopsWhenItsDatabaseRefuses: a database that answers with a
// refusal (here one that does not exist) ends serve at once, with
// PostgreSQL's reason: no wait can mend it.
func TestServeStopsWhenItsDatabaseRefuses(t *testing.T) {
	testenv.Long(t, "starts the server process")
	u, err := url.Parse(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database"
	p, _ := testenv.Launch(t, "serve", u.String())
	select {
	case err := <-p.Exited:
		if err == nil || !strings.Contains(p.Log(), `database "no_such_database" does not exist`) {
			t.Fatalf("serve ended with %v, want PostgreSQL's refusal:\n%s", err, p.Log())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("serve still runs 5 s after its database refused it:\n%s", p.Log())
	}
}
