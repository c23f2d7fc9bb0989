package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
)

// Replication says whether a commit waits for a synchronous standby. Acknowledged
// keys are at risk where a standby streams that commits do not wait for (a failover
// to it loses what it had not received), or where commits do not wait for their own
// disk (synchronous_commit off: a crash of the primary itself loses them). A server with no standby at all,
// a development database say, acknowledges a commit once it is on its disk.
type Replication struct {
	SynchronousCommit string `json:"synchronousCommit"`           // the setting
	StandbyNames      string `json:"synchronousStandbyNames"`     // the setting; empty: none
	CommitWaits       bool   `json:"commitWaitsForStandby"`       // before a commit is acknowledged
	Attached          int    `json:"synchronousStandbysAttached"` // connected now; -1: the role may not see
	Streaming         int    `json:"standbysStreaming"`           // standbys connected now, synchronous or not
}

// AtRisk reports whether an acknowledged key can be lost: in a failover to a standby
// that commits do not wait for, or in a crash, when commits do not wait for the disk.
func (r Replication) AtRisk() bool {
	return r.SynchronousCommit == "off" || (!r.CommitWaits && r.Streaming > 0)
}

// Describe says it in a few words, for a log line.
func (r Replication) Describe() string {
	switch {
	case r.SynchronousCommit == "off":
		return "commits do not wait for their own disk (synchronous_commit off): a crash of the primary itself, or a failover, can lose acknowledged keys"
	case !r.CommitWaits && r.Streaming > 0:
		return "asynchronous: a standby streams, but a commit does not wait for it, and a failover to it can lose acknowledged keys"
	case !r.CommitWaits:
		return "no standby: a commit is acknowledged once it is on this server's disk"
	case r.Attached == 0:
		return "synchronous, with no synchronous standby attached: commits wait until one is"
	}
	return "synchronous: a commit waits for a synchronous standby"
}

// WritesHeld says why every write is answered 503 now (ErrNotReplicated), or "".
func (r Replication) WritesHeld() string {
	if r.CommitWaits && r.Attached == 0 {
		return "commits wait for a synchronous standby and none is attached: every write is answered 503 until one is"
	}
	return ""
}

//go:embed sql/commit_replication.sql
var commitReplicationSQL string

// Replication reads how the server replicates this pool's commits.
func (s *Store) Replication(ctx context.Context) (r Replication, err error) {
	var hidden int // standbys the role may not see
	err = s.db.QueryRowContext(ctx, commitReplicationSQL).Scan(&r.SynchronousCommit, &r.StandbyNames, &r.Attached, &hidden, &r.Streaming)
	if err != nil {
		return Replication{}, fmt.Errorf("read replication settings: %w", dbErr(err))
	}
	r.CommitWaits = r.StandbyNames != "" && slices.Contains([]string{"on", "remote_write", "remote_apply"}, r.SynchronousCommit)
	if r.Attached == 0 && hidden > 0 {
		r.Attached = -1
	}
	return r, nil
}
