// Package statusmix counts the answers the tools (the bench, the chaos
// campaign) get, by HTTP status, and writes the mix the way both reports
// show it.
package statusmix

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Mix counts answers by HTTP status; 0 stands for no answer (a
// transport error, or no answer in time).
type Mix map[int]int

// Add adds the counts of o to s.
func (s Mix) Add(o Mix) {
	for status, n := range o {
		s[status] += n
	}
}

// String lists the counts by status, as "none×2 201×48".
func (s Mix) String() string {
	var parts []string
	for _, status := range slices.Sorted(maps.Keys(s)) {
		name := strconv.Itoa(status)
		if status == 0 {
			name = "none"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, s[status]))
	}
	return strings.Join(parts, " ")
}
