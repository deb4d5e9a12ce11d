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

-- name: mysql_registration_lock
-- One replica at a time writes a namespace's entries (vendors.registration_turn): waits up
-- to the lock timeout; 1 when taken. Released with mysql_release_tick_lock.
SELECT GET_LOCK(%s, %s);

-- name: postgres_registration_lock
-- The postgresql:// store's registration lock, with its key (lock_registration there).
SELECT pg_advisory_xact_lock(%s);
