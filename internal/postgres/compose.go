package postgres

import (
	"embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// An operation's statements are composed, not copied. The part of each
// statement that writes the key row (complete it for a free scope, over a
// row it takes over, or fenced by a claim token) is written once per shape
// in sql/key/; an operation writes only its effect, in sql/effect/, the
// CTEs that change its business rows FROM the key row (finished). At
// start-up composed puts the effect in the place each shape marks
// (@effect) and numbers its parameters after the shape's: what runs is
// exactly the text composed, and `demo-api sql` prints it.
//
// The create keeps its statements whole (create_demo_request*.sql): its
// one-phase statement is the benchmarked path, written for speed.

//go:embed sql/key/*.sql sql/effect/*.sql
var composeFiles embed.FS

// keyShape is a statement shape of sql/key/: its file, the name of the
// statement it makes of an effect's file, how many key parameters come
// before the effect's own, and which of them is the scope's actor.
type keyShape struct {
	file  string
	name  func(effect string) string
	keys  int
	actor int
}

var (
	shapeFree     = keyShape{"free.sql", func(e string) string { return e }, 11, 2}
	shapeTakeover = keyShape{"takeover.sql", func(e string) string { return strings.TrimSuffix(e, ".sql") + "_takeover.sql" }, 11, 2}
	shapeFinish   = keyShape{"finish.sql", func(e string) string { return "finish_claim_" + e }, 9, 6}
)

// composedStatements are the statements composed so far, by name, for the
// tests that prepare every statement and for `demo-api sql`.
var composedStatements = map[string]string{}

// effectFiles returns the names of the files of sql/effect/, each an
// operation's effect (demo.go).
func effectFiles() []string {
	entries, err := composeFiles.ReadDir("sql/effect")
	if err != nil {
		panic("postgres: " + err.Error())
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	return names
}

// composed returns the statements of the effect sql/effect/name, one per
// path: the one-phase statement in its two forms and the two-phase finish.
func composed(name string) keyStatements {
	eff, err := composeFiles.ReadFile("sql/effect/" + name)
	if err != nil {
		panic("postgres: " + err.Error())
	}
	return composedOf(name, "sql/effect/"+name, string(eff))
}

// composedOf returns the statements of the effect text (from source),
// named after name.
func composedOf(name, source, text string) keyStatements {
	return keyStatements{
		onePhase: writeStatements{free: compose(shapeFree, name, source, text), takeOver: compose(shapeTakeover, name, source, text)},
		finish:   compose(shapeFinish, name, source, text),
	}
}

// noEffect is the effect of an answer that changes nothing but its key (a
// refusal, such as a 422): a CTE that writes nothing, so each statement
// reports 0 for effect.
const noEffect = `-- No business change: the key row alone holds the answer.
effect AS (
    SELECT FROM finished WHERE false
`

// effectParam is a parameter of an effect's file: :1, :2, … its own, in
// the order of its Go arguments, and :actor_id, the scope's actor. A
// PostgreSQL cast (::) is not one.
var effectParam = regexp.MustCompile(`(^|[^:]):([0-9]+|actor_id)\b`)

// compose writes the statement of shape with the effect text (from
// source), and records it under the name shape gives name.
func compose(shape keyShape, name, source, text string) string {
	key, err := composeFiles.ReadFile("sql/key/" + shape.file)
	if err != nil {
		panic("postgres: " + err.Error())
	}
	effect := effectParam.ReplaceAllStringFunc(text, func(m string) string {
		sub := effectParam.FindStringSubmatch(m)
		if sub[2] == "actor_id" {
			return sub[1] + "$" + strconv.Itoa(shape.actor)
		}
		i, _ := strconv.Atoi(sub[2])
		return sub[1] + "$" + strconv.Itoa(shape.keys+i)
	})
	keyHeader, keyBody := cutHeader(string(key))
	effHeader, effBody := cutHeader(effect)
	before, after, ok := strings.Cut(keyBody, "@effect\n")
	if !ok {
		panic("postgres: sql/key/" + shape.file + " has no @effect line")
	}
	stmt := shape.name(name)
	var b strings.Builder
	fmt.Fprintf(&b, "-- %s: sql/key/%s with the effect %s (composed at start-up).\n--\n", stmt, shape.file, source)
	b.WriteString(keyHeader)
	b.WriteString("--\n")
	b.WriteString(effHeader)
	b.WriteString(before)
	b.WriteString(strings.TrimRight(effBody, "\n") + "\n")
	b.WriteString(after)
	composedStatements[stmt] = b.String()
	return b.String()
}

// cutHeader returns the comment lines at the top of a file, and the rest.
func cutHeader(text string) (header, body string) {
	rest := text
	for strings.HasPrefix(rest, "--") {
		line, tail, _ := strings.Cut(rest, "\n")
		header += line + "\n"
		rest = tail
	}
	return header, rest
}

// Statements returns every composed statement by name (as
// cancel_demo_request.sql), as PostgreSQL runs it.
func Statements() map[string]string {
	m := make(map[string]string, len(composedStatements))
	for k, v := range composedStatements {
		m[k] = v
	}
	return m
}
