package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	h := Handler(Config{Workshop: true, TTL: time.Minute, Lease: 10 * time.Second, Expedite: true})
	tests := []struct {
		path, status, contentType string
	}{
		{"/", "200", "text/html; charset=utf-8"},
		{"/workshop", "200", "text/html; charset=utf-8"},
		{"/ui/app.js", "200", "text/javascript; charset=utf-8"},
		{"/ui/client.js", "200", "text/javascript; charset=utf-8"},
		{"/ui/workshop.js", "200", "text/javascript; charset=utf-8"},
		{"/ui/style.css", "200", "text/css; charset=utf-8"},
		{"/ui/steps.json", "200", "application/json"},
		{"/ui/config.json", "200", "application/json"},
		{"/ui/icon.svg", "200", "image/svg+xml"},
		{"/ui/missing.js", "404", ""},
		{"/ui/", "404", ""},
		{"/ui/../web.go", "404", ""},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if got := rec.Result().Status[:3]; got != tc.status {
			t.Errorf("GET %s: %s, want %s", tc.path, got, tc.status)
		}
		if tc.contentType != "" && rec.Header().Get("Content-Type") != tc.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, rec.Header().Get("Content-Type"), tc.contentType)
		}
		for k, v := range pageHeaders {
			if rec.Header().Get(k) != v {
				t.Errorf("GET %s: %s %q, want %q", tc.path, k, rec.Header().Get(k), v)
			}
		}
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/config.json", nil))
	var cfg struct {
		Workshop     bool
		TTLSeconds   int
		LeaseSeconds int
		DeskFaults   bool
		Expedite     bool
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &cfg); err != nil || !cfg.Workshop || cfg.TTLSeconds != 60 || cfg.LeaseSeconds != 10 || cfg.DeskFaults || !cfg.Expedite {
		t.Fatalf("config.json %s: %v", rec.Body, err)
	}
}

func TestSteps(t *testing.T) {
	steps := Steps()
	seen := map[string]bool{}
	for _, s := range steps {
		switch {
		case s.Name == "" || s.Says == "":
			t.Errorf("step %+v lacks a name or what it says", s)
		case seen[s.Name]:
			t.Errorf("step %s is listed twice", s.Name)
		case s.Needs != "" && s.Needs != "workshop" && s.Needs != "ttl" && s.Needs != "desk" && s.Needs != "expedite":
			t.Errorf("step %s needs %q, which no reader knows", s.Name, s.Needs)
		}
		seen[s.Name] = true
	}
	if len(steps) < 9 {
		t.Fatalf("%d steps, want every branch", len(steps))
	}
}
