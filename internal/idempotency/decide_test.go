package idempotency

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	completed := func(fp string, expiresIn time.Duration) *Record {
		return &Record{Fingerprint: fp, State: Completed, ExpiresAt: now.Add(expiresIn)}
	}
	inProgress := func(fp string, leaseLeft, expiresIn time.Duration) *Record {
		return &Record{Fingerprint: fp, State: InProgress, LockedUntil: now.Add(leaseLeft), ExpiresAt: now.Add(expiresIn)}
	}
	tests := []struct {
		name string
		prev *Record
		fp   string
		want Decision
	}{
		{"nothing stored", nil, "a", Decision{Kind: ClaimNew}},
		{"completed, same payload", completed("a", time.Hour), "a", Decision{Kind: Replay}},
		{"completed, other payload", completed("a", time.Hour), "b", Decision{Kind: Mismatch}},
		{"completed, expired", completed("a", -time.Second), "a", Decision{Kind: TakeOverExpired}},
		{"completed, expires this instant", completed("a", 0), "a", Decision{Kind: TakeOverExpired}},
		{"completed, expired, other payload is a new intent", completed("a", -time.Second), "b", Decision{Kind: TakeOverExpired}},
		{"in progress, lease alive", inProgress("a", 10*time.Second, time.Hour), "a", Decision{Kind: Busy, LeaseLeft: 10 * time.Second}},
		{"in progress, lease alive, other payload", inProgress("a", 10*time.Second, time.Hour), "b", Decision{Kind: Mismatch}},
		{"in progress, lease passed", inProgress("a", -time.Second, time.Hour), "a", Decision{Kind: TakeOverLease}},
		{"in progress, lease ends this instant", inProgress("a", 0, time.Hour), "a", Decision{Kind: TakeOverLease}},
		{"in progress, lease passed, other payload", inProgress("a", -time.Second, time.Hour), "b", Decision{Kind: Mismatch}},
		{"in progress past TTL, lease alive", inProgress("a", time.Second, -time.Second), "a", Decision{Kind: Busy, LeaseLeft: time.Second}},
		{"in progress past TTL and lease", inProgress("a", -time.Second, -time.Second), "b", Decision{Kind: TakeOverExpired}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.prev, tt.fp, now); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}
