package main

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// recorder is the root's testenv.Recorder that also records every call and
// each POST's time and Authorization, and can put the server out of reach.
type recorder struct {
	testenv.Recorder
	mu    sync.Mutex
	posts []post
	calls []string // method, path and query, key
	cut   bool     // the server is out of reach: every call is closed unanswered
}

// post is a POST that reached the recorder.
type post struct {
	path, key, attempt, auth string
	at                       time.Time
}

// proxy starts the recorder in front of target and returns its URL.
func (rec *recorder) proxy(t *testing.T, target string) string {
	rec.Each = func(r *http.Request) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if r.Method == http.MethodPost {
			rec.posts = append(rec.posts, post{r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Client-Attempt"),
				r.Header.Get("Authorization"), time.Now()})
		}
		rec.calls = append(rec.calls, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Idempotency-Key"))
		if rec.cut {
			panic(http.ErrAbortHandler)
		}
	}
	return rec.Proxy(t, target)
}

// setCut puts the server out of reach or back.
func (rec *recorder) setCut(cut bool) {
	rec.mu.Lock()
	rec.cut = cut
	rec.mu.Unlock()
}
