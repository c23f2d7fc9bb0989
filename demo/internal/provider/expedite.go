package provider

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// maxAmount bounds a charge's amount.
const maxAmount = 1000

// sweepEvery is how often SweepHolds looks for held slots past their hold.
const sweepEvery = time.Second

// handleStats is GET /v1/stats. The fault knobs leave it alone: a test or
// a chaos check reads it while the desk is down for its senders.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.store.stats(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// refusedBy answers err, the error of a call's store method, unless it is
// nil: 422 for a definite refusal, 503 for anything else. It reports
// whether it answered.
func (s *Server) refusedBy(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return false
	}
	if ref, ok := errors.AsType[*refusal](err); ok {
		writeProblem(w, http.StatusUnprocessableEntity, ref.code, ref.detail)
		return true
	}
	s.fail(w, r, err)
	return true
}

// SweepHolds releases the slots held past their hold, every second, until
// ctx ends. The provider command runs it beside the desk's server.
func (s *Server) SweepHolds(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.ReleaseExpiredHolds(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.logger.ErrorContext(ctx, "review desk: release expired holds", "err", err)
		case n > 0:
			s.logger.InfoContext(ctx, "holds expired", "slots", n)
		}
	}
}

// ReleaseExpiredHolds marks every slot still held past its hold released
// (releasedBy hold_expired), and returns how many this call released. Each
// such slot is released by exactly one call, however many desks sweep the
// database at once.
func (s *Server) ReleaseExpiredHolds(ctx context.Context) (int, error) {
	return s.store.expireHolds(ctx)
}
