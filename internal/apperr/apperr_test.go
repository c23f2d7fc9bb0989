package apperr_test

import (
	"testing"

	"github.com/demo-api/demo-api/internal/apperr"
)

// TestEveryCodeIsAnswerable: each code declares an error status, a title
// and a page's paragraph, so no code reaches a client as a bare 500 or an
// empty page.
func TestEveryCodeIsAnswerable(t *testing.T) {
	codes := apperr.Codes()
	if len(codes) == 0 {
		t.Fatal("no codes")
	}
	for _, c := range codes {
		p, ok := apperr.ProblemOf(c)
		switch {
		case !ok:
			t.Errorf("%s: listed but not declared", c)
		case p.Status < 400 || p.Status > 599:
			t.Errorf("%s: status %d, want an error status", c, p.Status)
		case p.Title == "" || p.About == "":
			t.Errorf("%s: no title or no page text", c)
		}
	}
	for code, status := range map[string]int{apperr.KeyMissing: 400, apperr.OperationInProgress: 409,
		apperr.KeyPayloadMismatch: 422, apperr.Internal: 500, apperr.Unavailable: 503} {
		if p, _ := apperr.ProblemOf(code); p.Status != status {
			t.Errorf("%s: status %d, want %d (the contract's)", code, p.Status, status)
		}
	}
	if _, ok := apperr.ProblemOf("no_such_code"); ok {
		t.Error("an undeclared code is a code")
	}
}
