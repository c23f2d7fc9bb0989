package postgres

import (
	"context"

	"github.com/demo-api/demo-api/internal/demo"
)

// insertDemoRequestSQL is the baseline's only statement.
const insertDemoRequestSQL = `
INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
VALUES ($1::uuid, $2, $3, $4, $5, coalesce($6::timestamptz, now()))
RETURNING created_at`

// InsertDemoRequest inserts r with one plain INSERT and no idempotency
// record: the benchmark's baseline (httpapi.BaselineStore). It is prepared
// like the claim and the finish, so the baseline differs from a create only
// by the idempotency layer. Its created_at is the database clock (or
// Store.Clock), returned in the result.
func (s *Store) InsertDemoRequest(ctx context.Context, r demo.Request) (demo.Request, error) {
	st, err := s.prepared(ctx, insertDemoRequestSQL)
	if err != nil {
		return demo.Request{}, err
	}
	if err := st.QueryRowxContext(ctx, r.ID, r.Actor, r.State, r.Topic, r.Note, s.now()).Scan(&r.CreatedAt); err != nil {
		return demo.Request{}, dbErr(err)
	}
	return r, nil
}
