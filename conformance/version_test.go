package conformance

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestVersionMatchesModulePath: the go command refuses a tag vX.Y.Z with
// X ≥ 2 on a module path without the suffix /vX, so Version's major is
// the path's.
func TestVersionMatchesModulePath(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	path := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(b)
	if path == nil {
		t.Fatal("go.mod names no module")
	}
	major, _, _ := strings.Cut(Version, ".")
	want := []string{"0", "1"}
	if m := regexp.MustCompile(`/v(\d+)$`).FindSubmatch(path[1]); m != nil {
		want = []string{string(m[1])}
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(Version) || !slices.Contains(want, major) {
		t.Errorf("Version %q on module %s: want major %v", Version, path[1], want)
	}
}
