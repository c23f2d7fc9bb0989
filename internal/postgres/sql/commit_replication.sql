-- commit_replication.sql: whether a commit of this session waits for a
-- synchronous standby, and how many synchronous standbys are attached.
--
-- A commit waits when synchronous_standby_names names a standby and
-- synchronous_commit is on, remote_write or remote_apply (local and off
-- never wait). A role without pg_read_all_stats sees pg_stat_replication's
-- rows without their sync_state: those are counted as hidden.
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('synchronous_standby_names') AS standby_names,
       count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) AS attached,
       count(*) FILTER (WHERE sync_state IS NULL) AS hidden
FROM pg_stat_replication
