package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// template is the example resource as the template names it, whatever the
// tree's example line says after a rename.
var template = resource{Singular: "demo request", Plural: "demo requests", Package: "demo", Type: "Request"}

func mustResource(t *testing.T, singular, plural string) resource {
	t.Helper()
	r, err := newResource(singular, plural)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewResource(t *testing.T) {
	for _, tt := range []struct {
		singular, plural string
		want             resource
	}{
		{"ticket", "", resource{"ticket", "tickets", "ticket", "Ticket"}},
		{"box", "", resource{"box", "boxes", "box", "Box"}},
		{"policy", "", resource{"policy", "policies", "policy", "Policy"}},
		{"day", "", resource{"day", "days", "day", "Day"}},
		{"support-ticket", "", resource{"support ticket", "support tickets", "supportticket", "SupportTicket"}},
		{"line_item", "", resource{"line item", "line items", "lineitem", "LineItem"}},
		{"person", "people", resource{"person", "people", "person", "Person"}},
		{"support-person", "support-people", resource{"support person", "support people", "supportperson", "SupportPerson"}},
	} {
		if got := mustResource(t, tt.singular, tt.plural); got != tt.want {
			t.Errorf("newResource(%q, %q) = %+v, want %+v", tt.singular, tt.plural, got, tt.want)
		}
	}
	for _, bad := range [][2]string{
		{"Ticket", ""}, {"ticket2", ""}, {"a-b-c", ""}, {"-ticket", ""}, {"", ""}, {"tick et", ""},
		{"support-ticket", "tickets"}, // not as many words
		{"type", ""},                  // a keyword of Go
		{"ticket", "Tickets"},
	} {
		if r, err := newResource(bad[0], bad[1]); err == nil {
			t.Errorf("newResource(%q, %q) = %+v, want a refusal", bad[0], bad[1], r)
		}
	}
}

// TestReplaceResource: every case form of the name, inside longer names
// too; the id, state and code words; the business package; and what stays.
func TestReplaceResource(t *testing.T) {
	ticket := resourceRules(template, mustResource(t, "ticket", ""))
	for _, tt := range []struct{ path, in, want string }{
		// the name, singular and plural, in every case form
		{"a.md", "a demo request, two demo requests", "a ticket, two tickets"},
		{"a.md", "Demo requests are filed. Demo Request", "Tickets are filed. Ticket"},
		{"a.sql", "FROM demo_requests r JOIN create_demo_request(x) demo_requests_pkey", "FROM tickets r JOIN create_ticket(x) tickets_pkey"},
		{"a.go", "func (s *Store) CreateDemoRequest(r demo.Request) DemoRequests", "func (s *Store) CreateTicket(r ticket.Ticket) Tickets"},
		{"a.go", "handleGetDemoRequest(getDemoRequestSQL) DemoRequestChanged", "handleGetTicket(getTicketSQL) TicketChanged"},
		{"a.go", `"/v1/demo-requests/" + id, "demo-request:" + id, "demo-requests.create"`, `"/v1/tickets/" + id, "ticket:" + id, "tickets.create"`},
		{"a.js", "const demoRequest = 1; DEMO_REQUESTS", "const ticket = 1; TICKETS"},
		// the id, state and code words
		{"a.go", "RequestID string `json:\"requestId\" db:\"request_id\"`", "TicketID string `json:\"ticketId\" db:\"ticket_id\"`"},
		{"a.go", "requestID, row.RequestID, TestWithoutRequestIDIsAnError", "ticketID, row.TicketID, TestWithoutTicketIDIsAnError"},
		{"a.sql", "o.request_id = ANY($2::uuid[]) -- request_ids, request_state", "o.ticket_id = ANY($2::uuid[]) -- ticket_ids, ticket_state"},
		{"a.md", "`request_not_cancellable`", "`ticket_not_cancellable`"},
		// the business package
		{"a.go", `import "x/internal/demo"` + "\n" + `s := &demo.Service{}; demo.StateAccepted`, `import "x/internal/ticket"` + "\n" + `s := &ticket.Service{}; ticket.StateAccepted`},
		{"a.go", "Deps{Demo: svc}; s.Demo; d.Demo == nil", "Deps{Ticket: svc}; s.Ticket; d.Ticket == nil"},
		{"internal/demo/demo.go", "// Package demo is the business.\npackage demo\n\n// Request is a demo request.\ntype Request struct{}\nfunc f() (Request, error)",
			"// Package ticket is the business.\npackage ticket\n\n// Ticket is a ticket.\ntype Ticket struct{}\nfunc f() (Ticket, error)"},
		{"internal/demo/demo_test.go", "package demo_test", "package ticket_test"},
		{"a.md", "[the store](../internal/postgres/demo.go), [demo.Service](../internal/demo/demo.go)",
			"[the store](../internal/postgres/ticket.go), [ticket.Service](../internal/ticket/ticket.go)"},
		{"internal/httpapi/demo_requests.go", "", ""},
		// what stays: HTTP requests, chi's names, the words of other things
		{"a.go", "func (r *http.Request) idempotency.Request; middleware.RequestID; X-Request-Id; http_request_duration",
			"func (r *http.Request) idempotency.Request; middleware.RequestID; X-Request-Id; http_request_duration"},
		{"a.go", "newRequest(requests); a request id; reqID(r); Demo2; Demos; the demo. The full demo's demo/", "newRequest(requests); a request id; reqID(r); Demo2; Demos; the demo. The full demo's demo/"},
		{"a.md", "Demo: the full demo; demonstrate; demo-api; demo_api_http; x_request_id; http.Request", "Demo: the full demo; demonstrate; demo-api; demo_api_http; x_request_id; http.Request"},
		{"b.go", "type Request struct{}", "type Request struct{}"}, // not in the business package
		{"internal/demo/demo.go", "func f(r *http.Request) Requested", "func f(r *http.Request) Requested"},
	} {
		if got := string(replaceResource([]byte(tt.in), ticket, tt.path)); got != tt.want {
			t.Errorf("in %s:\n%s\nbecomes\n%s\nwant\n%s", tt.path, tt.in, got, tt.want)
		}
	}
	if got := string(replaceResource([]byte("internal/httpapi/demo_requests.go"), ticket, "")); got != "internal/httpapi/tickets.go" {
		t.Errorf("the file internal/httpapi/demo_requests.go becomes %s, want internal/httpapi/tickets.go", got)
	}
	if got := string(replaceResource([]byte("internal/demo/demo_test.go"), ticket, "")); got != "internal/ticket/ticket_test.go" {
		t.Errorf("the file internal/demo/demo_test.go becomes %s, want internal/ticket/ticket_test.go", got)
	}
}

// TestReplaceResourceOtherNames: two words, an irregular plural, and the
// article before a name that starts with a vowel.
func TestReplaceResourceOtherNames(t *testing.T) {
	for _, tt := range []struct {
		to        resource
		in, want  string
		path      string
		narrative string
	}{
		{mustResource(t, "order", ""), "a demo request; A demo request; an idea; data demo request", "an order; An order; an idea; data order", "a.md", "a before a vowel"},
		{mustResource(t, "support-ticket", ""), "demo_requests demoRequest DemoRequests demo.Request request_id RequestID demo-request",
			"support_tickets supportTicket SupportTickets supportticket.SupportTicket support_ticket_id SupportTicketID support-ticket", "a.go", "two words"},
		{mustResource(t, "person", "people"), "demo requests, DemoRequests, demo_request", "people, People, person", "a.md", "an irregular plural"},
	} {
		if got := string(replaceResource([]byte(tt.in), resourceRules(template, tt.to), tt.path)); got != tt.want {
			t.Errorf("%s:\n%s\nbecomes\n%s\nwant\n%s", tt.narrative, tt.in, got, tt.want)
		}
	}
	// From a renamed tree on: order → ticket, "an" before the consonant becomes "a".
	order := mustResource(t, "order", "")
	if got := string(replaceResource([]byte("an order, Orders, order_id, OrderID"), resourceRules(order, mustResource(t, "ticket", "")), "a.go")); got != "a ticket, Tickets, ticket_id, TicketID" {
		t.Errorf("order to ticket: %q", got)
	}
}

// TestRenameResourceTwice: a tree renamed moves its files, says the new
// name in the tool's example line, and a second run changes nothing.
func TestRenameResourceTwice(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                                       "module example.com/x\n",
		"internal/demo/demo.go":                        "// Package demo decides demo requests.\npackage demo\n\n// Request is a demo request.\ntype Request struct {\n\tID string `json:\"requestId\"`\n}\n",
		"internal/httpapi/demo_requests.go":            "package httpapi\n\nimport \"example.com/x/internal/demo\"\n\nvar r demo.Request\n",
		"migrations/000003_create_demo_request.up.sql": "CREATE TABLE demo_requests (id uuid);\n",
		"scripts/rename/resource.go":                   "package main\n\n" + `var example = resource{Singular: "demo request", Plural: "demo requests", Package: "demo", Type: "Request"}` + "\n",
		"LICENSE":                                      "the demo request authors\n",
	}
	for f, text := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	saved := example
	t.Cleanup(func() { example = saved })
	example = template
	ticket := mustResource(t, "ticket", "")
	if err := renameResource(ticket, "scripts/rename"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"internal/ticket/ticket.go":              "// Package ticket decides tickets.\npackage ticket\n\n// Ticket is a ticket.\ntype Ticket struct {\n\tID string `json:\"ticketId\"`\n}\n",
		"internal/httpapi/tickets.go":            "package httpapi\n\nimport \"example.com/x/internal/ticket\"\n\nvar r ticket.Ticket\n",
		"migrations/000003_create_ticket.up.sql": "CREATE TABLE tickets (id uuid);\n",
		"scripts/rename/resource.go":             "package main\n\n" + `var example = resource{Singular: "ticket", Plural: "tickets", Package: "ticket", Type: "Ticket"}` + "\n",
		"LICENSE":                                "the demo request authors\n",
	}
	check := func() {
		t.Helper()
		for f, text := range want {
			b, err := os.ReadFile(f)
			if err != nil || string(b) != text {
				t.Errorf("%s: %v\n%s\nwant\n%s", f, err, b, text)
			}
		}
		for _, gone := range []string{"internal/demo", "internal/httpapi/demo_requests.go", "migrations/000003_create_demo_request.up.sql"} {
			if _, err := os.Stat(gone); err == nil {
				t.Errorf("%s is still there", gone)
			}
		}
	}
	check()
	example = ticket // as the rewritten line says, for the second run
	if err := renameResource(ticket, "scripts/rename"); err != nil {
		t.Fatal(err)
	}
	check()
}

// TestRefusesWhereTheDemoBuildsOnIt: the full demo (a module that requires
// this one) builds on the example resource, so a resource rename refuses to
// start while it is there, and changes nothing.
func TestRefusesWhereTheDemoBuildsOnIt(t *testing.T) {
	dir := t.TempDir()
	for f, text := range map[string]string{
		"go.mod":                "module example.com/x\n",
		"demo/go.mod":           "module example.com/x/demo\n\nrequire example.com/x v0.0.0\n",
		"internal/demo/demo.go": "package demo\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	err := run([]string{"-resource", "ticket"})
	if err == nil || !strings.Contains(err.Error(), "rm -r demo") {
		t.Errorf("run -resource ticket beside demo/: %v, want a refusal that says rm -r demo", err)
	}
	if _, err := os.Stat("internal/demo/demo.go"); err != nil {
		t.Errorf("the refused rename changed the tree: %v", err)
	}
}

// TestRefusesAServiceNamedAsItsResource: in the service tickets, whose
// resource is ticket, neither rename can tell the two apart, so both refuse
// and change nothing.
func TestRefusesAServiceNamedAsItsResource(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/acme/tickets\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	saved := example
	t.Cleanup(func() { example = saved })
	example = mustResource(t, "ticket", "")
	for _, args := range [][]string{{"-resource", "support-ticket"}, {"example.com/acme/helpdesk"}} {
		if err := run(args); err == nil || !strings.Contains(err.Error(), "share a name") {
			t.Errorf("rename %v: %v, want a refusal: the service and the resource share a name", args, err)
		}
	}
	if b, _ := os.ReadFile("go.mod"); string(b) != "module example.com/acme/tickets\n" {
		t.Errorf("a refused rename changed go.mod:\n%s", b)
	}
	if err := run([]string{"-resource", "ticket"}); err != nil { // the same name again: nothing to do
		t.Errorf("rename -resource ticket in the ticket's tree: %v, want nothing done", err)
	}
}
