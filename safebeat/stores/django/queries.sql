-- Named queries of the Django store's vendor code (the tick lock and the clock), run on
-- Django's cursor. Parameters are Django's %s placeholders, in order. The rest of the
-- store is ORM queries, or, on PostgreSQL through psycopg 3, the postgresql:// store's
-- own statements (safebeat/stores/postgres/queries.sql).

-- name: postgres_clock
SELECT clock_timestamp();

-- name: mysql_clock
-- UTC_TIMESTAMP is naive; the caller makes it aware UTC.
SELECT UTC_TIMESTAMP(6);

-- name: postgres_tick_limits
-- Bounds the tick transaction: a replica frozen while holding the lock loses its
-- session (and the lock) after the idle timeout. Parameters: idle, lock timeout.
SELECT set_config('idle_in_transaction_session_timeout', %s, true),
       set_config('lock_timeout', %s, true),
       set_config('statement_timeout', '60s', true);

-- name: postgres_write_limits
-- Bounds a write transaction safebeat opens (register, write_windows, prune, ...), as a
-- tick is bounded: a replica frozen inside it loses its session after the idle timeout,
-- and it waits for another's row locks at most the lock timeout. Parameters: idle, lock.
SELECT set_config('idle_in_transaction_session_timeout', %s, true),
       set_config('lock_timeout', %s, true),
       set_config('statement_timeout', '60s', true);

-- name: postgres_try_tick_lock
-- Transaction-scoped, so PgBouncer in transaction mode keeps working; never waits.
SELECT pg_try_advisory_xact_lock(%s), clock_timestamp();

-- name: mariadb_idle_timeout
-- Ends the session (and frees the lock) of a replica frozen inside its tick. MariaDB only.
SET SESSION idle_transaction_timeout = %s;

-- name: mariadb_default_idle_timeout
SET SESSION idle_transaction_timeout = DEFAULT;

-- name: mysql_lock_wait
-- How long a statement of ours waits for another session's row lock (InnoDB's default is
-- 50 s): a replica frozen inside a write holds up the others at most this long.
SET SESSION innodb_lock_wait_timeout = %s;

-- name: mysql_default_lock_wait
SET SESSION innodb_lock_wait_timeout = DEFAULT;

-- name: mysql_try_tick_lock
-- GET_LOCK names are server-wide; the lock outlives the transaction, so it is released
-- explicitly (mysql_release_tick_lock) whatever happens.
SELECT GET_LOCK(%s, 0), UTC_TIMESTAMP(6);

-- name: mysql_release_tick_lock
SELECT RELEASE_LOCK(%s);

-- name: postgres_entry_facts
-- The facts of the dispatch rows of each entry of the ORM's query of safebeat_entry
-- (safebeat.facts), joined after its FROM, whole rows in one statement as the
-- postgresql:// store's entry_facts reads them. NOW stands for Django's Now().
-- The newest run holding a live lease: the newest start of safebeat_dispatch_running,
-- whose condition this WHERE repeats.
LEFT JOIN LATERAL (
    SELECT d.window_at, d.started_at, d.lease_until, d.task_id
    FROM safebeat_dispatch AS d
    WHERE d.namespace = safebeat_entry.namespace AND d.entry = safebeat_entry.name
      AND d.started_at IS NOT NULL AND d.finished_at IS NULL AND d.lease_until > NOW
    ORDER BY d.started_at DESC LIMIT 1
) AS r ON true
-- The newest dispatched window: one probe of safebeat_dispatch_dispatched, whose
-- condition this WHERE repeats, past any number of newer skipped or failed rows.
LEFT JOIN LATERAL (
    SELECT d.window_at, d.claimed_at, d.started_at
    FROM safebeat_dispatch AS d
    WHERE d.namespace = safebeat_entry.namespace AND d.entry = safebeat_entry.name
      AND d.status IN ('claimed', 'sent')
    ORDER BY d.window_at DESC LIMIT 1
) AS q ON true

-- name: entry_facts
-- The same on MySQL/MariaDB (MariaDB has no LATERAL) and SQLite: each row found by its
-- id, as the sqlite:// store's entry_facts finds it. On SQLite the newest dispatched
-- row is one probe of the partial index safebeat_dispatch_dispatched (its condition
-- written out: SQLite matches a partial index only to literal values); MySQL/MariaDB
-- have no partial index, so there the unique key is walked back past the skipped rows.
LEFT JOIN safebeat_dispatch AS r ON r.id = (
    SELECT d.id FROM safebeat_dispatch AS d
    WHERE d.namespace = safebeat_entry.namespace AND d.entry = safebeat_entry.name
      AND d.started_at IS NOT NULL AND d.finished_at IS NULL AND d.lease_until > NOW
    ORDER BY d.started_at DESC LIMIT 1)
LEFT JOIN safebeat_dispatch AS q ON q.id = (
    SELECT d.id FROM safebeat_dispatch AS d
    WHERE d.namespace = safebeat_entry.namespace AND d.entry = safebeat_entry.name
      AND d.status IN ('claimed', 'sent')
    ORDER BY d.window_at DESC LIMIT 1)
