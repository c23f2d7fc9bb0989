// Package web is the browser side of demo-api: two pages that serve embeds
// and hands out under a strict Content-Security-Policy, and the list of
// workshop steps that the workshop page and demo-api workshop both walk.
//
//	GET /                the create page: one intent, its attempts, its outcome
//	GET /workshop        one button per branch of the contract
//	GET /ui/{file}       the pages' scripts, style and steps.json
//	GET /ui/config.json  what the pages need to know of this server
//
// The pages are plain HTML, CSS and JavaScript modules: no build step, no
// framework, nothing from another origin. They call only the API.
package web

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
)

//go:embed static
var static embed.FS

// Config is what the pages are told of the server.
type Config struct {
	Workshop bool // the Workshop-* headers are on: show the switches
	// Room is a workshop room: the pages ask for a name, and send the
	// token dev-<name>.
	Room  bool
	TTL   time.Duration // replay window, for the expiry step
	Lease time.Duration // bounds the in-progress step's delay
	// DeskFaults reports whether the server passes the review desk's fault
	// knobs on (PUT /workshop/desk-faults), for the external step.
	DeskFaults bool
	// Expedite reports whether the server has a review desk behind it, and
	// so the expedite, for the resume step.
	Expedite bool
}

// SharedNames are names that lab machines share (whoami on many of them):
// the pages warn a participant who picks one, since two people of one name
// share its keys.
var SharedNames = []string{"root", "student", "ubuntu", "admin", "user", "guest", "pi", "vagrant", "ec2-user", "lab", "test"}

// pageHeaders are sent with every page and asset: only this origin's
// scripts, styles and connections; no inline script or style; never framed;
// asked again each time, so a workshop room never runs a stale page.
var pageHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"Cache-Control":           "no-cache",
}

// contentTypes are the types of the embedded files, set here rather than
// from the system's table (which on some systems maps .js to text/plain, a
// type a module script is refused with under nosniff).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".json": "application/json",
	".svg":  "image/svg+xml",
}

// Handler serves the pages, their assets and config.json.
func Handler(cfg Config) http.Handler {
	config, _ := json.Marshal(map[string]any{
		"workshop":     cfg.Workshop,
		"room":         cfg.Room,
		"ttlSeconds":   int(cfg.TTL.Seconds()),
		"leaseSeconds": int(cfg.Lease.Seconds()),
		"deskFaults":   cfg.DeskFaults,
		"expedite":     cfg.Expedite,
		"nameRule":     auth.RoomNameRule,
		"sharedNames":  SharedNames,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range pageHeaders {
			w.Header().Set(k, v)
		}
		name := ""
		switch p := r.URL.Path; {
		case p == "/":
			name = "index.html"
		case p == "/workshop":
			name = "workshop.html"
		case p == "/ui/config.json":
			w.Header().Set("Content-Type", contentTypes[".json"])
			w.Write(config)
			return
		case strings.HasPrefix(p, "/ui/"):
			name = strings.TrimPrefix(p, "/ui/")
		}
		b, err := fs.ReadFile(static, "static/"+name)
		if name == "" || strings.Contains(name, "/") || err != nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", contentTypes[path.Ext(name)])
		w.Write(b)
	})
}

// Step is one branch of the contract, as the workshop shows it.
type Step struct {
	Name string `json:"name"`
	Says string `json:"says"` // what the contract answers
	// Needs names what the server must have for the step to run:
	// "workshop" (WORKSHOP=true), "ttl" (WORKSHOP=true for Workshop-TTL, or
	// a server TTL of at most 2m), "desk" (the
	// review desk's fault knobs), "expedite" (WORKSHOP=true and a review
	// desk behind the server, for its operation of several steps), or
	// nothing.
	Needs string `json:"needs,omitempty"`
}

// Steps returns the workshop's steps, in order, from static/steps.json: the
// one list that the workshop page and demo-api workshop both walk.
func Steps() []Step {
	b, err := static.ReadFile("static/steps.json")
	if err != nil {
		panic(err)
	}
	var steps []Step
	if err := json.Unmarshal(b, &steps); err != nil {
		panic("web: static/steps.json: " + err.Error())
	}
	return steps
}
