package testenv

import "testing"

// TestARetryAfterCountsDownFromTheClaim: a README comment "Retry-After: 14"
// holds when the header counts down from the claim as the rule says: 14,
// or 15 when the first request started late, and less by the seconds the
// retry's answer came late on a busy machine; never more than 15, and
// never less than the time the block took allows.
func TestARetryAfterCountsDownFromTheClaim(t *testing.T) {
	block := "curl ... # 409, Retry-After: 14\n"
	answer := func(header, done string) string {
		return "HTTP/1.1 409 Conflict\nRetry-After: " + header + "\n\n{}\n@@ curl done " + done + "\n"
	}
	tests := []struct {
		name, out string
		start     string
		holds     bool
	}{
		{"on time", answer("14", "101.05"), "100.00", true},
		{"the first request started late", answer("15", "101.05"), "100.00", true},
		{"the retry answered 2.3 s after the block began", answer("13", "102.30"), "100.00", true},
		{"13 a second after the block began", answer("13", "101.05"), "100.00", false},
		{"more than half the lease", answer("16", "101.05"), "100.00", false},
		{"whole seconds only (an old bash): 13 within two", answer("13", "101"), "100", true},
		{"whole seconds only: 12 within two", answer("12", "101"), "100", false},
		{"no header", "HTTP/1.1 201 Created\n@@ curl done 101.05\n", "100.00", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := retryAfterHolds(block, tc.out, tc.start)
			if (err == nil) != tc.holds {
				t.Errorf("retryAfterHolds(%q, %q) = %v; want holds %v", tc.out, tc.start, err, tc.holds)
			}
		})
	}
}
