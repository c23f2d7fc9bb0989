package delivery

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestEveryQueuedKindIsHandedOver: each kind of event a statement queues
// (INSERT INTO outbox, in internal/postgres/sql and the migrations) has its
// hand-over in kinds, which every dispatcher has: serve's, the dispatch
// command's and the tests'. A kind registered in one of them alone would
// leave its events pending, holding back every later event of their request.
func TestEveryQueuedKindIsHandedOver(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../postgres/sql/*.sql", "../../migrations/*.sql", "../../migrations/*/*.sql"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	insert := regexp.MustCompile(`INSERT INTO outbox \(([^)]*)\)\s*(?:SELECT|VALUES)[^']*(?:'([a-z_]+)')?`)
	withKind := regexp.MustCompile(`\bkind\b`)
	queued := map[string]string{} // kind: a file that queues it
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range insert.FindAllStringSubmatch(string(b), -1) {
			kind := KindSubmit // the column's default
			if withKind.MatchString(m[1]) {
				kind = m[2]
			}
			queued[kind] = f
		}
	}
	if _, ok := queued[KindCancel]; !ok {
		t.Fatalf("found no statement that queues a cancel in %v: the pattern no longer matches the statements", files)
	}
	handled := kinds(nil)
	for kind, f := range queued {
		if _, ok := handled[kind]; !ok {
			t.Errorf("%s queues events of kind %q, which delivery's kinds does not hand over", f, kind)
		}
	}
	t.Logf("kinds queued: %v", slices.Sorted(maps.Keys(queued)))
}
