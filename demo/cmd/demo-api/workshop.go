package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/term"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/internal/service"
)

const workshopUsage = `usage: demo-api workshop [--base URL] [--token T] [--step NAME | --all] [--ttl D] [--provider URL]

Walks through every branch of the Idempotency-Key contract against a running
demo-api, prints each HTTP exchange, and says after each step whether the
answer is what the contract says; it exits 1 if any step differs. It is the
teaching walk of this service: its steps need demo-api's problem codes and
workshop knobs. To check another API, or a new operation, from outside, use
idemcheck (the module conformance/ at the root).

Steps that need the server's workshop knobs (WORKSHOP=true): in-progress,
lost-response, transient, expiry. The expiry step gives its key a TTL of 5 s
(Workshop-TTL); with --ttl, the server's IDEMPOTENCY_TTL of at most 2m, it
waits that long instead and needs no knob. The external step sets the review
desk's faults through the server (PUT /workshop/desk-faults: the token's own
account only, so a room can run it at once), which needs the knobs and a
desk with PROVIDER_FAULTS=true, and a server that gives up on a delivery
within seconds (DISPATCH_MAX_ATTEMPTS=4); make run starts both so. The
resume step needs the knobs and a server with a review desk (PROVIDER_URL).
Both also ask the desk at --provider about what it holds when one answers.

In a workshop room (WORKSHOP_ROOM=true) each participant gives their own
--token dev-<name>.
`

// workshopStep is one branch of the contract, shown and checked. The
// steps, in order, and what each says come from the list the workshop page
// walks too (web.Steps); here is how the terminal runs each.
type workshopStep struct {
	web.Step
	run func(w *workshop) error
}

var workshopSteps = stepsOf(web.Steps(), map[string]func(*workshop) error{
	"claim":         (*workshop).stepClaim,
	"replay":        (*workshop).stepReplay,
	"mismatch":      (*workshop).stepMismatch,
	"in-progress":   (*workshop).stepInProgress,
	"lost-response": (*workshop).stepLostResponse,
	"transient":     (*workshop).stepTransient,
	"refusal":       (*workshop).stepRefusal,
	"bad-request":   (*workshop).stepBadRequest,
	"cancel":        (*workshop).stepCancel,
	"external":      (*workshop).stepExternal,
	"resume":        (*workshop).stepResume,
	"expiry":        (*workshop).stepExpiry,
})

// stepsOf pairs each listed step with its run, and refuses a list and a
// set of runs that do not match one to one.
func stepsOf(list []web.Step, runs map[string]func(*workshop) error) []workshopStep {
	var steps []workshopStep
	for _, s := range list {
		run, ok := runs[s.Name]
		if !ok {
			panic("workshop: no run for the step " + s.Name)
		}
		steps = append(steps, workshopStep{s, run})
	}
	if len(steps) != len(runs) {
		panic("workshop: a run for a step that is not in the list")
	}
	return steps
}

// needs says what a step needs of the server, as the terminal reader sets it.
var needs = map[string]string{
	"workshop": " (needs WORKSHOP=true)",
	"desk":     " (needs --provider)",
	"expedite": " (needs WORKSHOP=true and PROVIDER_URL)",
	"ttl":      " (needs WORKSHOP=true, or --ttl of at most 2m)",
}

// errSkip marks a step that could not run here.
var errSkip = errors.New("skipped")

type workshop struct {
	base, token string
	provider    string // the review desk's base URL
	ttl, delay  time.Duration
	out         io.Writer
	colour      bool
	hc          *http.Client
	ctx         context.Context // ends every request of the run (Ctrl-C, a caller's deadline)
	run         string          // a tag in every key, so the workshop can run twice
	created     []string        // the requests the steps created, in order
}

// workshopCmd is demo-api workshop.
func workshopCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo-api workshop", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	w := &workshop{ctx: ctx, out: stdout, hc: &http.Client{Timeout: 30 * time.Second}, run: uuid.NewString()[:8]}
	fs.StringVar(&w.base, "base", "http://localhost:8080", "the API's base URL")
	fs.StringVar(&w.token, "token", "dev-alice", "bearer token (in a workshop room: dev-<your name>)")
	fs.StringVar(&w.provider, "provider", "http://localhost:8090", "the review desk's base URL, for the external step")
	step := fs.String("step", "", "run this step only: "+strings.Join(stepNames(), ", "))
	all := fs.Bool("all", false, "run every step")
	fs.DurationVar(&w.ttl, "ttl", 0, "the server's IDEMPOTENCY_TTL, for the expiry step")
	fs.DurationVar(&w.delay, "delay", 3*time.Second, "how long the in-progress step holds the first request (below half the server's lease)")
	if err := parseFlags(fs, args, workshopUsage, stdout); err != nil {
		return err
	}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		w.colour = true
	}
	w.base, w.provider = strings.TrimRight(w.base, "/"), strings.TrimRight(w.provider, "/")
	steps := workshopSteps
	switch {
	case *step != "" && *all, *step == "" && !*all:
		return &service.ExitError{Code: service.ExitRefused, Err: errors.New("give --step NAME or --all")}
	case *step != "":
		i := slices.IndexFunc(workshopSteps, func(s workshopStep) bool { return s.Name == *step })
		if i < 0 {
			return &service.ExitError{Code: service.ExitRefused, Err: fmt.Errorf("no step %q; the steps: %s", *step, strings.Join(stepNames(), ", "))}
		}
		steps = workshopSteps[i : i+1]
	}
	failed := 0
	for _, s := range steps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.printf("\n%s\n", w.paint("1", "== "+s.Name+": "+s.Says+needs[s.Needs]))
		err := s.run(w)
		switch {
		case errors.Is(err, errSkip):
			w.printf("%s %v\n", w.paint("33", "SKIP"), err)
		case err != nil:
			failed++
			w.printf("%s %v\n", w.paint("31", "FAIL"), err)
		default:
			w.printf("%s the answer is what the contract says\n", w.paint("32", "PASS"))
		}
	}
	if failed > 0 {
		return &service.ExitError{Code: service.ExitRefused, Err: fmt.Errorf("%d of %d steps differ from the contract", failed, len(steps))}
	}
	return nil
}

func stepNames() []string {
	var names []string
	for _, s := range workshopSteps {
		names = append(names, s.Name)
	}
	return names
}

// exchange is one request and what came back.
type exchange struct {
	status  int
	header  http.Header
	body    []byte
	dropped bool // the connection closed without an answer
}

// send sends one request to the API (path) or, given a whole URL, to the
// review desk, printing it and its answer as a person reads them.
func (w *workshop) send(method, path, key, body string, header ...string) exchange {
	url := w.base + path
	if strings.HasPrefix(path, "http") {
		url = path
	}
	req, _ := http.NewRequestWithContext(w.ctx, method, url, strings.NewReader(body))
	if url != path {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if key != "" {
		// Every attempt is the step's, and printed: without GetBody, and
		// with a body it cannot rewind where there is none, the transport
		// cannot send a request with an Idempotency-Key again on its own
		// when a reused connection closes without an answer (as the
		// lost-response and resume steps make it).
		req.GetBody = nil
		if req.Body == http.NoBody {
			req.Body = io.NopCloser(strings.NewReader(""))
		}
	}
	w.printRequest(method, path, req.Header, body)
	resp, err := w.hc.Do(req)
	if err != nil {
		w.printf("< (no answer: %v)\n", err)
		return exchange{dropped: true}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	w.printAnswer(resp, b)
	return exchange{status: resp.StatusCode, header: resp.Header, body: b}
}

// printRequest prints a request as a person reads it: what it asks and the
// headers of the contract.
func (w *workshop) printRequest(method, path string, header http.Header, body string) {
	w.printf("%s\n", w.paint("36", "> "+method+" "+path))
	for _, h := range []string{"Idempotency-Key", "X-Client-Attempt", "Prefer", "Workshop-Delay", "Workshop-Fail", "Workshop-Drop-Response", "Workshop-Stop-After", "Workshop-TTL"} {
		if v := header.Get(h); v != "" {
			w.printf("%s\n", w.paint("36", "> "+h+": "+v))
		}
	}
	if body != "" {
		w.printf("%s\n", w.paint("36", "> "+body))
	}
}

// printAnswer prints an answer and its body b as a person reads them.
func (w *workshop) printAnswer(resp *http.Response, b []byte) {
	w.printf("< %d %s\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	for _, h := range []string{"Location", "Idempotent-Replayed", "Retry-After", "Link", "Preference-Applied", "Content-Type"} {
		if v := resp.Header.Get(h); v != "" {
			w.printf("< %s: %s\n", h, v)
		}
	}
	if len(b) > 0 {
		w.printf("< %s\n", bytes.TrimSpace(b))
	}
}

// client is the Go client (api/client) against the API, its every attempt
// printed like send's exchanges: a step that shows the client's retries
// shows each of them.
func (w *workshop) client() (*client.Client, error) {
	hc := &http.Client{Transport: printedTransport{w: w, next: http.DefaultTransport}}
	return client.New(client.Config{BaseURL: w.base, Token: w.token, HTTPClient: hc,
		OnAttempt: func(a client.Attempt) { w.printf("(the client, attempt %d: %s)\n", a.N, a.Decision) }})
}

// printedTransport prints each exchange that passes through it.
type printedTransport struct {
	w    *workshop
	next http.RoundTripper
}

func (p printedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body, req = b, req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	p.w.printRequest(req.Method, strings.TrimPrefix(req.URL.String(), p.w.base), req.Header, string(body))
	resp, err := p.next.RoundTrip(req)
	if err != nil {
		p.w.printf("< (no answer: %v)\n", err)
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		p.w.printf("< (the answer broke off: %v)\n", err)
		return nil, err
	}
	p.w.printAnswer(resp, b)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

func (w *workshop) create(key, body string, header ...string) exchange {
	e := w.send(http.MethodPost, "/v1/demo-requests", key, body, header...)
	if id := requestID(e); e.status == http.StatusCreated && id != "" && !slices.Contains(w.created, id) {
		w.created = append(w.created, id)
	}
	return e
}

func (w *workshop) key(name string) string { return "ws-" + w.run + "-" + name }

func (w *workshop) printf(format string, args ...any) { fmt.Fprintf(w.out, format, args...) }

func (w *workshop) paint(code, s string) string {
	if !w.colour {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// errNoKnobs is a step's failure on a server without the workshop knobs.
var errNoKnobs = errors.New("the server refuses the workshop knobs: start it with WORKSHOP=true (make run does)")

// expect checks an answer: its status and, for a problem, its code.
func expect(e exchange, status int, code string) error {
	if e.dropped {
		return fmt.Errorf("no answer, want %d %s", status, code)
	}
	if e.status == http.StatusBadRequest && problemCode(e) == "workshop_disabled" {
		return errNoKnobs
	}
	if e.status != status || (code != "" && problemCode(e) != code) {
		return fmt.Errorf("got %d %s, want %d %s", e.status, problemCode(e), status, code)
	}
	return nil
}

func problemCode(e exchange) string {
	var p struct{ Code string }
	json.Unmarshal(e.body, &p)
	return p.Code
}

func requestID(e exchange) string {
	var r struct {
		RequestID string `json:"requestId"`
	}
	json.Unmarshal(e.body, &r)
	return r.RequestID
}

const workshopBody = `{"topic":"workshop","note":"shown step by step"}`

func (w *workshop) stepClaim() error {
	e := w.create(w.key("claim"), workshopBody)
	if err := expect(e, 201, ""); err != nil {
		return err
	}
	if e.header.Get("Location") == "" || e.header.Get("Idempotent-Replayed") != "" {
		return errors.New("a first answer must carry Location and no Idempotent-Replayed")
	}
	return nil
}

func (w *workshop) stepReplay() error {
	first := w.create(w.key("replay"), workshopBody)
	again := w.create(w.key("replay"), workshopBody)
	if err := expect(again, first.status, ""); err != nil {
		return err
	}
	if !bytes.Equal(first.body, again.body) || again.header.Get("Idempotent-Replayed") != "true" {
		return errors.New("the replay must be the first body byte for byte, with Idempotent-Replayed: true")
	}
	return nil
}

func (w *workshop) stepMismatch() error {
	w.create(w.key("mismatch"), workshopBody)
	e := w.create(w.key("mismatch"), `{"topic":"another topic"}`)
	if err := expect(e, 422, "key_payload_mismatch"); err != nil {
		return err
	}
	if !strings.Contains(e.header.Get("Link"), `rel="describedby"`) {
		return errors.New("a mismatch must link to its documentation (rel=describedby)")
	}
	return nil
}

func (w *workshop) stepInProgress() error {
	key := w.key("in-progress")
	first := make(chan exchange, 1)
	held := &workshop{ctx: w.ctx, base: w.base, token: w.token, out: io.Discard, hc: w.hc}
	go func() { first <- held.create(key, workshopBody, "Workshop-Delay", w.delay.String()) }()
	time.Sleep(w.delay / 3) // the first request holds its claim now
	busy := w.create(key, workshopBody)
	if err := expect(busy, 409, "operation_in_progress"); err != nil {
		return err
	}
	if busy.header.Get("Retry-After") == "" || !strings.Contains(busy.header.Get("Link"), `rel="monitor"`) {
		return errors.New("a 409 must carry Retry-After and a monitor Link to the key's outcome")
	}
	waited := w.create(key, workshopBody, "Prefer", fmt.Sprintf("wait=%d", int(w.delay.Seconds())+5))
	owner := <-first
	if err := expect(waited, 201, ""); err != nil {
		return err
	}
	if waited.header.Get("Preference-Applied") != "wait" || !bytes.Equal(waited.body, owner.body) {
		return errors.New("with Prefer: wait the retry must get the first answer, with Preference-Applied: wait")
	}
	return nil
}

func (w *workshop) stepLostResponse() error {
	key := w.key("lost")
	lost := w.create(key, workshopBody, "Workshop-Drop-Response", "true")
	if !lost.dropped {
		return fmt.Errorf("got %d, want the connection closed without an answer", lost.status)
	}
	e := w.create(key, workshopBody)
	if err := expect(e, 201, ""); err != nil {
		return err
	}
	if e.header.Get("Idempotent-Replayed") != "true" {
		return errors.New("the request was created before the answer was lost: the retry must be a replay")
	}
	return nil
}

func (w *workshop) stepTransient() error {
	key := w.key("transient")
	e := w.create(key, workshopBody, "Workshop-Fail", "after-claim")
	if err := expect(e, 503, "unavailable"); err != nil {
		return err
	}
	again := w.create(key, workshopBody)
	if err := expect(again, 201, ""); err != nil {
		return err
	}
	if again.header.Get("Idempotent-Replayed") != "" {
		return errors.New("a released claim stores nothing: the retry must run as a first request")
	}
	return nil
}

func (w *workshop) stepRefusal() error {
	key := w.key("refusal")
	e := w.create(key, `{"topic":"blocked"}`)
	if err := expect(e, 422, "topic_refused"); err != nil {
		return err
	}
	again := w.create(key, `{"topic":"blocked"}`)
	if !bytes.Equal(again.body, e.body) || again.header.Get("Idempotent-Replayed") != "true" {
		return errors.New("a refusal is an answer: the retry must replay it")
	}
	return nil
}

func (w *workshop) stepBadRequest() error {
	e := w.create("", workshopBody)
	if err := expect(e, 400, "idempotency_key_missing"); err != nil {
		return err
	}
	if !strings.Contains(e.header.Get("Link"), `rel="describedby"`) {
		return errors.New("the key's errors must link to their documentation (rel=describedby)")
	}
	return nil
}

func (w *workshop) stepCancel() error {
	id := requestID(w.create(w.key("cancel-create"), workshopBody))
	if id == "" {
		return errors.New("could not create a request to cancel")
	}
	// The cancel goes through the Go client: one intent, its key on every
	// attempt, retried only when the answer is not definite.
	c, err := w.client()
	if err != nil {
		return err
	}
	ctx := w.ctx // the client's budget bounds each intent
	it, err := client.NewCancelIntent(id)
	if err != nil {
		return err
	}
	it.Key = w.key("cancel-1")
	first, err := c.Send(ctx, it)
	if err != nil || first.Status != http.StatusOK {
		return fmt.Errorf("got %d, %v; want 200 with the cancelled request", first.Status, err)
	}
	// The same intent again, as a caller whose answer was lost sends it.
	again, err := c.Send(ctx, it)
	if err != nil || !bytes.Equal(again.Body, first.Body) || !again.Replayed {
		return errors.New("the retry of the cancel must replay its 200")
	}
	next, err := client.NewCancelIntent(id)
	if err != nil {
		return err
	}
	next.Key = w.key("cancel-2")
	_, err = c.Send(ctx, next)
	if p, ok := errors.AsType[*client.ProblemError](err); !ok || p.Status != 422 || p.Code != "request_not_cancellable" {
		return fmt.Errorf("got %v, want 422 request_not_cancellable", err)
	}
	return nil
}

func (w *workshop) stepExternal() error {
	// The faults are this token's own: the server aims them at the desk's
	// calls for this account, and no one else's deliveries see them.
	faults := func(f string) error {
		e := w.send(http.MethodPut, "/workshop/desk-faults", "", f)
		switch {
		case e.dropped:
			return fmt.Errorf("no answer from the server to the desk's faults")
		case e.status == http.StatusNotFound:
			return fmt.Errorf("%w: this server passes on no desk faults: start it with WORKSHOP=true and a PROVIDER_URL (make run does)", errSkip)
		case e.status == http.StatusBadRequest && problemCode(e) == "workshop_disabled":
			return fmt.Errorf("%w: the review desk refuses its fault knobs: start it with PROVIDER_FAULTS=true (make run does)", errSkip)
		case e.status != http.StatusOK:
			return fmt.Errorf("the server answered %d %s to the desk's faults", e.status, problemCode(e))
		}
		return nil
	}
	if err := faults(`{}`); err != nil { // is there a desk with its knobs?
		return err
	}
	// What the earlier steps created is handed over first: the desk going
	// down must catch only this step's request.
	for _, id := range w.created {
		if _, err := w.awaitDelivery("/v1/demo-requests/" + id + "/delivery"); err != nil {
			return err
		}
	}
	// The desk is down: no attempt gets an answer, and the dispatcher, after
	// its last attempt, cannot tell whether the desk took the request.
	if err := faults(`{"down":true}`); err != nil {
		return err
	}
	defer faults(`{}`)
	id := requestID(w.create(w.key("external"), workshopBody))
	if id == "" {
		return errors.New("could not create a request to hand over")
	}
	path := "/v1/demo-requests/" + id + "/delivery"
	st, err := w.awaitDelivery(path)
	if err != nil {
		return err
	}
	if st.State != "unknown" {
		return fmt.Errorf("the delivery ended %s, want unknown: the desk never answered", st.State)
	}
	if err := expect(w.send(http.MethodPost, path+"/reconcile", "", ""), 503, "unavailable"); err != nil {
		return fmt.Errorf("reconcile while the desk is down: %w", err)
	}
	// Back up, the desk says it never took it: reconcile queues it again,
	// and the dispatcher sends it, once.
	if err := faults(`{}`); err != nil {
		return err
	}
	if err := expect(w.send(http.MethodPost, path+"/reconcile", "", ""), 200, ""); err != nil {
		return err
	}
	got, err := w.awaitDelivery(path)
	if err != nil {
		return err
	}
	if got.State != "submitted" || got.ProviderReference == "" {
		return fmt.Errorf("the delivery ended %s, want submitted with the desk's reference", got.State)
	}
	desk := w.send(http.MethodGet, w.provider+"/v1/submissions/"+got.ProviderKey, "", "")
	if desk.dropped {
		w.printf("(no review desk answers at %s: the delivery was checked at the server only)\n", w.provider)
		return nil
	}
	var sub struct{ Reference string }
	json.Unmarshal(desk.body, &sub)
	if desk.status != http.StatusOK || sub.Reference != got.ProviderReference {
		return fmt.Errorf("the desk's submission (%d, %s) is not the one recorded (%s)", desk.status, sub.Reference, got.ProviderReference)
	}
	return nil
}

// deliveryView is what the delivery route shows.
type deliveryView struct {
	State, ProviderKey, ProviderReference string
	Attempts                              int
}

// awaitDelivery reads the delivery at path until it is no longer pending,
// printing each change, for at most 30 s.
func (w *workshop) awaitDelivery(path string) (deliveryView, error) {
	w.printf("(reading %s until it changes)\n", path)
	var last deliveryView
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		req, _ := http.NewRequestWithContext(w.ctx, http.MethodGet, w.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+w.token)
		resp, err := w.hc.Do(req)
		if err != nil {
			return last, err
		}
		var st deliveryView
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return last, fmt.Errorf("GET %s: %d", path, resp.StatusCode)
		}
		if st != last {
			w.printf("< %s after %d attempts\n", st.State, st.Attempts)
			last = st
		}
		if st.State != "pending" {
			return st, nil
		}
	}
	if last.Attempts == 0 {
		return last, errors.New("no dispatcher attempted the delivery: start the server with PROVIDER_URL (make run does)")
	}
	return last, errors.New("the delivery did not change for 30 s: start the server with DISPATCH_MAX_ATTEMPTS=4 (make run does)")
}

// workshopTTL is the TTL the expiry step gives its key (Workshop-TTL).
const workshopTTL = 5 * time.Second

func (w *workshop) stepExpiry() error {
	if w.ttl > 2*time.Minute {
		return fmt.Errorf("%w: --ttl %s is too long to wait for: give none (the step then uses Workshop-TTL), or start a server with IDEMPOTENCY_TTL=1m", errSkip, w.ttl)
	}
	// Without --ttl the key gets a short TTL of its own; the server's stays
	// for every other key.
	ttl, header := w.ttl, []string{"Workshop-TTL", workshopTTL.String()}
	if ttl > 0 {
		header = nil
	} else {
		ttl = workshopTTL
	}
	key := w.key("expiry")
	first := w.create(key, workshopBody, header...)
	if err := expect(first, 201, ""); err != nil {
		return err
	}
	w.printf("(waiting %s for the record to expire)\n", ttl+time.Second)
	time.Sleep(ttl + time.Second)
	again := w.create(key, workshopBody)
	if err := expect(again, 201, ""); err != nil {
		return err
	}
	if again.header.Get("Idempotent-Replayed") != "" || requestID(again) == requestID(first) {
		return errors.New("after the TTL the key must run as a new intent, with a new requestId")
	}
	return nil
}

// expediteView is what the expedite's answer and its route show.
type expediteView struct {
	RequestID, State, SlotReference, ChargeReference string
}

// outcomeView is what the outcome route shows of a key and its run.
type outcomeView struct {
	State                 string
	LeaseRemainingSeconds *int
	Status                int
	Run                   *struct {
		RecoveryPoint, State string
		References           map[string]string
		Attempts             int
	}
}

// maxResumeWait bounds how long the resume step retries a run that another
// runner (the server's completer) holds.
const maxResumeWait = 20 * time.Second

func (w *workshop) stepResume() error {
	id := requestID(w.create(w.key("resume-create"), workshopBody))
	if id == "" {
		return errors.New("could not create a request to expedite")
	}
	path, key := "/v1/demo-requests/"+id+"/expedite", w.key("resume")
	// The runner "dies" after the slot: the connection closes without an
	// answer, and the run waits at slot_reserved with its lease ended.
	stopped := w.send(http.MethodPost, path, key, "", "X-Client-Attempt", "1", "Workshop-Stop-After", "slot_reserved")
	switch {
	case stopped.status == http.StatusNotFound:
		return fmt.Errorf("%w: this server has no expedite: start it with PROVIDER_URL, a review desk (make run does)", errSkip)
	case problemCode(stopped) == "workshop_disabled":
		return errNoKnobs
	case !stopped.dropped:
		return fmt.Errorf("got %d %s, want the connection closed without an answer after slot_reserved", stopped.status, problemCode(stopped))
	}
	o := w.send(http.MethodGet, "/v1/idempotency-keys/"+key+"?operation=demo-requests.expedite", "", "")
	var out outcomeView
	if err := json.Unmarshal(o.body, &out); o.status != http.StatusOK || err != nil || out.Run == nil {
		return fmt.Errorf("the outcome route answered %d without the run", o.status)
	}
	slot := out.Run.References["slot_reserved"]
	switch {
	case out.Run.Attempts > 1:
		// Within the second since the stop the server's completer took the
		// run over: it resumes it, and the retry below gets its answer.
		w.printf("(the server's completer took the run over first: it is %s at %s)\n", out.Run.State, out.Run.RecoveryPoint)
	case out.State != "in_progress" || out.Run.RecoveryPoint != "slot_reserved" || out.Run.State != "running" || slot == "":
		return fmt.Errorf("the outcome shows the key %s, the run %s at %q; want in_progress, running at slot_reserved with the slot's reference",
			out.State, out.Run.State, out.Run.RecoveryPoint)
	case out.LeaseRemainingSeconds == nil || *out.LeaseRemainingSeconds != 0:
		return errors.New("the stopped run must wait with its lease passed (leaseRemainingSeconds 0)")
	}
	// The retry takes the key over and resumes at the recovery point: it
	// asks the desk about the charge, charges, and finishes. While another
	// runner holds the run it gets 409 with Retry-After.
	attempt := 2
	var got exchange
	for deadline := time.Now().Add(maxResumeWait); ; attempt++ {
		got = w.send(http.MethodPost, path, key, "", "X-Client-Attempt", strconv.Itoa(attempt))
		if got.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
		wait, err := strconv.Atoi(got.header.Get("Retry-After"))
		if err != nil || wait < 1 {
			return errors.New("a 409 must carry Retry-After")
		}
		w.printf("(waiting %d s, as Retry-After says)\n", min(wait, 5))
		time.Sleep(time.Duration(min(wait, 5)) * time.Second)
	}
	if got.status == http.StatusUnprocessableEntity && strings.Contains(string(got.body), "insufficient_credit") {
		return errors.New("the desk refused the charge: this account's credit is spent (start the desk afresh: make db-reset, or PROVIDER_CREDIT)")
	}
	if err := expect(got, http.StatusCreated, ""); err != nil {
		return err
	}
	var e expediteView
	json.Unmarshal(got.body, &e)
	switch {
	case e.RequestID != id || e.State != "confirmed" || e.SlotReference == "" || e.ChargeReference == "":
		return errors.New("the answer must be the confirmed order, with slotReference and chargeReference")
	case slot != "" && e.SlotReference != slot:
		return fmt.Errorf("the order holds slot %s, not the one reserved before the stop (%s): a second slot", e.SlotReference, slot)
	case got.header.Get("Idempotent-Replayed") == "true" && out.Run.Attempts == 1:
		w.printf("(the server's completer finished the run first: the retry got its answer)\n")
	}
	again := w.send(http.MethodPost, path, key, "", "X-Client-Attempt", strconv.Itoa(attempt+1))
	if err := expect(again, http.StatusCreated, ""); err != nil {
		return err
	}
	if !bytes.Equal(again.body, got.body) || again.header.Get("Idempotent-Replayed") != "true" {
		return errors.New("the next retry must replay the 201 byte for byte, with Idempotent-Replayed: true")
	}
	// The order as the server holds it, and, when the desk answers, the
	// one slot and the one charge it holds under the expedite's keys.
	var order expediteView
	if o := w.send(http.MethodGet, path, "", ""); o.status != http.StatusOK || json.Unmarshal(o.body, &order) != nil ||
		order.State != "confirmed" || order.SlotReference != e.SlotReference || order.ChargeReference != e.ChargeReference {
		return fmt.Errorf("the order reads %d %s, want confirmed with the answer's slot and charge", o.status, order.State)
	}
	var slotAt, chargeAt struct{ Reference, State string }
	s := w.send(http.MethodGet, w.provider+"/v1/slots/expedite:"+id+":slot", "", "")
	if s.dropped {
		w.printf("(no review desk answers at %s: the order was checked at the server only)\n", w.provider)
		return nil
	}
	c := w.send(http.MethodGet, w.provider+"/v1/charges/expedite:"+id+":charge", "", "")
	json.Unmarshal(s.body, &slotAt)
	json.Unmarshal(c.body, &chargeAt)
	if s.status != http.StatusOK || c.status != http.StatusOK || slotAt.Reference != e.SlotReference || slotAt.State != "charged" ||
		chargeAt.Reference != e.ChargeReference || chargeAt.State != "charged" {
		return fmt.Errorf("the desk holds slot %s (%s) and charge %s (%s), not the order's %s and %s, charged",
			slotAt.Reference, slotAt.State, chargeAt.Reference, chargeAt.State, e.SlotReference, e.ChargeReference)
	}
	return nil
}
