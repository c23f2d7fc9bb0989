package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runner sends the checks' requests and keeps what one check leaves for
// the next.
type runner struct {
	cfg Config
	url string
	hc  *http.Client

	firstKey string  // the key of first-request, which replay and mismatch reuse
	first    *answer // its answer; nil when it failed
	// replayMark is the header that marked a replay (e.g. Idempotent-Replayed),
	// if the replay check saw one: it tells a replay from a new result.
	replayMark string
}

func newRunner(cfg Config, target string) *runner {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Storm // a storm's connections are kept for the next
	return &runner{cfg: cfg, url: target, hc: &http.Client{Transport: tr, Timeout: cfg.Timeout}}
}

// answer is what one request got: a status, headers and body, or no
// answer at all (err).
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (a answer) String() string {
	if a.err != nil {
		return "no answer (" + a.err.Error() + ")"
	}
	return strconv.Itoa(a.status)
}

// ok reports whether the answer is a 2xx.
func (a answer) ok() bool { return a.err == nil && a.status/100 == 2 }

// id is the identity of the resource the answer names: the top-level
// JSON fields of the body named id or ending in Id or _id (all of them, so
// that an actor's id shared by every result cannot hide two resources), or
// else its Location. Empty when it names none.
func (a answer) id() string {
	var parts []string
	var fields map[string]json.RawMessage
	if json.Unmarshal(a.body, &fields) == nil {
		for name, v := range fields {
			if name == "id" || strings.HasSuffix(name, "Id") || strings.HasSuffix(name, "ID") || strings.HasSuffix(name, "_id") {
				if s := string(v); s != "" && s[0] != '{' && s[0] != '[' && s != "null" {
					parts = append(parts, name+"="+s)
				}
			}
		}
	}
	if len(parts) == 0 && a.header.Get("Location") != "" {
		return "Location: " + a.header.Get("Location")
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// result names the result the answer carries: its resource's identity when
// it names one (a replay that renders its body again is the same result,
// which the replay check judges on its own), else its status and bytes.
func (a answer) result() string {
	if id := a.id(); id != "" {
		return id
	}
	return fmt.Sprintf("%d %x", a.status, sha256.Sum256(a.body))
}

// same reports whether two answers carry the same result.
func (a answer) same(b answer) bool { return a.result() == b.result() }

// shortID is the identity for a report line.
func (a answer) shortID() string {
	if id := a.id(); id != "" {
		return id
	}
	return "no id in the body or Location"
}

// newKey is a fresh key: 26 random base32 characters behind a prefix that
// says where it came from.
func newKey() string { return "conformance-" + rand.Text() }

// quote writes a key as the draft's structured-field string (§2.1).
func quote(key string) string { return `"` + key + `"` }

// headerWith is h with the headers of over replacing those of the same name.
func headerWith(h, over http.Header) http.Header {
	out := h.Clone()
	for name, values := range over {
		out[name] = append([]string(nil), values...)
	}
	return out
}

// request builds the route's request with header and the key header's
// values (none: no key header at all).
func (r *runner) request(ctx context.Context, body []byte, header http.Header, keys ...string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, r.cfg.Method, r.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Del(r.cfg.KeyHeader)
	for _, k := range keys {
		req.Header.Add(r.cfg.KeyHeader, k)
	}
	return req, nil
}

// send sends one request and reads its answer. A 429 is no answer about
// the key (a rate limit stores nothing): send waits its Retry-After and
// sends again, within cfg.Settle.
func (r *runner) send(ctx context.Context, body []byte, header http.Header, keys ...string) answer {
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		a := r.sendOnce(ctx, body, header, keys...)
		if a.status != http.StatusTooManyRequests || !r.wait(ctx, a, deadline) {
			return a
		}
	}
}

func (r *runner) sendOnce(ctx context.Context, body []byte, header http.Header, keys ...string) answer {
	req, err := r.request(ctx, body, header, keys...)
	if err != nil {
		return answer{err: err}
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{err: fmt.Errorf("reading the body: %w", err)}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// settle sends key with body until the answer is not 409 (in progress),
// waiting each Retry-After, for at most cfg.Settle: the answer a client
// that keeps retrying ends with.
func (r *runner) settle(ctx context.Context, key string, body []byte, header http.Header) answer {
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		a := r.send(ctx, body, header, quote(key))
		if a.status != http.StatusConflict || !r.wait(ctx, a, deadline) {
			return a
		}
	}
}

// wait sleeps for a's Retry-After (1 s when it has none) and reports
// whether that ends before deadline.
func (r *runner) wait(ctx context.Context, a answer, deadline time.Time) bool {
	d := time.Second
	if s, err := strconv.Atoi(strings.TrimSpace(a.header.Get("Retry-After"))); err == nil {
		d = max(time.Duration(s)*time.Second, 100*time.Millisecond)
	} else if t, err := http.ParseTime(a.header.Get("Retry-After")); err == nil {
		d = max(time.Until(t), 100*time.Millisecond)
	}
	if time.Now().Add(d).After(deadline) {
		return false
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// together sends n copies of one request at once: each from its own
// goroutine, all released by one signal, and returns every answer.
func (r *runner) together(ctx context.Context, n int, key string) []answer {
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		req, err := r.request(ctx, r.cfg.Body, r.cfg.Header, quote(key))
		if err != nil {
			answers[i] = answer{err: err}
			continue
		}
		wg.Go(func() {
			<-start
			resp, err := r.hc.Do(req)
			if err != nil {
				answers[i] = answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers[i] = answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
		})
	}
	close(start)
	wg.Wait()
	return answers
}

// hangUp sends the route's request with key on a connection of its own
// and closes that connection without reading a byte: the client of a lost
// response. The request is written whole, so the target has it all.
func (r *runner) hangUp(ctx context.Context, key string) error {
	req, err := r.request(ctx, r.cfg.Body, r.cfg.Header, quote(key))
	if err != nil {
		return err
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), map[string]string{"http": "80", "https": "443"}[req.URL.Scheme])
	}
	d := &net.Dialer{Timeout: r.cfg.Timeout}
	var conn net.Conn
	if req.URL.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: d, Config: &tls.Config{ServerName: req.URL.Hostname()}}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	conn.SetWriteDeadline(time.Now().Add(r.cfg.Timeout))
	if err := req.Write(conn); err != nil {
		conn.Close()
		return err
	}
	return conn.Close()
}

// isNew reports whether b is another result than a: by the resource when
// both name one, else by the replay mark when the target has one, else by
// the bytes. known is false when nothing tells them apart (the same bytes,
// no id, no mark).
func (r *runner) isNew(a, b answer) (isNew, known bool) {
	switch {
	case a.id() != "" && b.id() != "":
		return a.id() != b.id(), true
	case r.replayMark != "":
		return b.header.Get(r.replayMark) == "", true
	case !bytes.Equal(a.body, b.body):
		return true, true
	}
	return false, false
}

// replayMarkOf is the header of replay, absent from first, whose name
// says replay (Idempotent-Replayed, X-Idempotency-Replayed, …).
func replayMarkOf(first, replay answer) string {
	for name := range replay.header {
		if strings.Contains(strings.ToLower(name), "replay") && first.header.Get(name) == "" {
			return name
		}
	}
	return ""
}

// firstDifference shows where two bodies part: the byte offset and a few
// bytes of each from there.
func firstDifference(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	snip := func(s []byte) string { return strconv.Quote(string(s[i:min(len(s), i+24)])) }
	return fmt.Sprintf("byte %d: %s, then %s", i, snip(a), snip(b))
}
