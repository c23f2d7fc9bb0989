-- count_runs_needing_attention.sql: how many runs need attention, for the
-- metrics.
SELECT count(*) AS n FROM runs WHERE state = 'needs_attention'
