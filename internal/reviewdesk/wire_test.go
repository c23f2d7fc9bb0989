package reviewdesk

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestWireWordsInOnePlace: the desk's routes, resources, header names and
// JSON fields are spelled in wire.go only, which the client and the double
// the tests run (testenv/deskdouble.go) import, so that a rename of the
// example can leave that one file alone.
func TestWireWordsInOnePlace(t *testing.T) {
	wireWord := regexp.MustCompile("\"/v1/|`json:\"|\"(Idempotency-Key|Idempotent-Replayed|Desk-Account|submissions|cancels)\"")
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../tools/testenv/deskdouble.go")
	for _, f := range files {
		if f == "wire.go" || f == "wire_test.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if w := wireWord.Find(b); w != nil {
			t.Errorf("%s spells a wire word of the desk (%s); keep it in wire.go", f, w)
		}
	}
}
