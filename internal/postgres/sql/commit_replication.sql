-- commit_replication.sql: whether this session's commit waits for a
-- synchronous standby (standby names set, synchronous_commit on, remote_write
-- or remote_apply), how many synchronous standbys are attached, and how many
-- standbys stream at all. Without pg_read_all_stats a standby's sync_state
-- reads NULL: it is counted as hidden (and as streaming).
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('synchronous_standby_names') AS standby_names,
       count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) AS attached,
       count(*) FILTER (WHERE sync_state IS NULL) AS hidden,
       count(*) AS streaming
FROM pg_stat_replication
