package desktest

import (
	"net/http"
	"sync"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// deskCalls counts the calls a desk served, by method and route, the key
// in the path written {key} (as "GET /v1/slots/{key}"): tests check that a
// runner asked before it sent, and sent once.
type deskCalls struct {
	mu      sync.Mutex
	n       map[string]int
	arrived map[string]func()
}

func (c *deskCalls) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Method + " " + testenv.DeskRoute(r.URL.Path)
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[name]++
		f := c.arrived[name]
		c.mu.Unlock()
		if f != nil {
			f()
		}
		next.ServeHTTP(w, r)
	})
}

// OnArrival runs f whenever a call of route (such as "POST /v1/slots")
// arrives, before the desk handles it: a test acts at that moment (stops
// the caller inside its call, say) instead of polling for the call's
// effect.
func (d *Desk) OnArrival(route string, f func()) {
	d.calls.mu.Lock()
	defer d.calls.mu.Unlock()
	if d.calls.arrived == nil {
		d.calls.arrived = map[string]func(){}
	}
	d.calls.arrived[route] = f
}

// Calls is how many calls of route (such as "POST /v1/slots") the desk
// served.
func (d *Desk) Calls(route string) int {
	d.calls.mu.Lock()
	defer d.calls.mu.Unlock()
	return d.calls.n[route]
}

// AllCalls is every route's count, for a failure's message.
func (d *Desk) AllCalls() map[string]int {
	d.calls.mu.Lock()
	defer d.calls.mu.Unlock()
	m := make(map[string]int, len(d.calls.n))
	for k, v := range d.calls.n {
		m[k] = v
	}
	return m
}
