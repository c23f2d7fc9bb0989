package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/problem"
)

// HeaderClientAttempt is the client's attempt at an intent: logged, and counted when answered.
// It is advice, not identity: the key says which intent, the attempt only
// how far the client's retries have come, bounded so a bad client cannot skew the count.
const (
	HeaderClientAttempt = "X-Client-Attempt"
	maxClientAttempt    = 1000
)

// waitKey is the context key of the wait a client prefers (Prefer: wait).
type waitKey struct{}

// readHints is the layer around each idempotent route that reads what a
// client may say of its attempt, before the route reads the attempt itself:
// X-Client-Attempt into the access-log note (from 2 on, the Runner reads the
// key before it writes, as it most likely exists), and Prefer: wait (read by
// preferredWait). Both are hints: neither changes which intent the key names.
// Errors: invalid_header, nothing stored.
func (s *api) readHints(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := clientAttempt(r); err != nil {
			problem.Write(s.Logger, w, r, err)
			return
		}
		if d := parsePreferWait(r); d > 0 {
			r = r.WithContext(context.WithValue(r.Context(), waitKey{}, d))
		}
		next.ServeHTTP(w, r)
	})
}

// preferredWait is the wait r's client prefers (readHints), 0 for none.
func preferredWait(r *http.Request) time.Duration {
	d, _ := r.Context().Value(waitKey{}).(time.Duration)
	return d
}

// clientAttempt reads X-Client-Attempt into r's access-log note (0 when absent). Errors: invalid_header.
func clientAttempt(r *http.Request) error {
	v := r.Header.Values(HeaderClientAttempt)
	if len(v) == 0 {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v[0]))
	if len(v) > 1 || err != nil || n < 1 || n > maxClientAttempt {
		return apperr.Errorf(apperr.InvalidHeader, "%s must be sent once, as a whole number from 1 to %d", HeaderClientAttempt, maxClientAttempt)
	}
	accesslog.Of(r).Attempt = n
	return nil
}

// parsePreferWait reads Prefer: wait=N (RFC 7240); other preferences are ignored.
// A preference is a hint: the Runner caps the wait, and a request that did
// wait for a replay says so with Preference-Applied.
func parsePreferWait(r *http.Request) time.Duration {
	for _, h := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`))
			if strings.EqualFold(strings.TrimSpace(name), "wait") && err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}
