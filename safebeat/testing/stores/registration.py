"""Migrating, the store clock, registering definitions, replicas and their heartbeats."""

from __future__ import annotations

from datetime import timedelta

from safebeat.stores.protocols import Store
from safebeat.testing.stores.support import (
    OTHER,
    REPLICA,
    StoreFactory,
    definitions,
    every_tenth_of_a_second,
    race,
    real_planner,
    registered,
    tick_until_claimed,
)


class RegistrationCases:
    """The contract's cases on migrating, registering and heartbeats; `StoreContract` runs them."""

    def test_migrate_is_idempotent(self, store: Store) -> None:
        """Migrating twice leaves the schema at the same version."""
        first = store.migrate()
        assert first >= 1
        assert store.migrate() == first

    def test_a_migrated_store_reports_the_schema_version_this_safebeat_writes(
        self, store: Store
    ) -> None:
        """After migrate, schema_version() is expected_schema_version, and the backend's own
        checks answer (a list, each with what it found)."""
        store.migrate()
        assert store.schema_version() == store.expected_schema_version >= 1
        assert all(check.name and check.found for check in store.checks())

    def test_clock_is_aware_utc_and_moves_forward(self, store: Store) -> None:
        """The store clock returns aware instants that do not go backwards."""
        first, second = store.clock(), store.clock()
        assert first.utcoffset() == timedelta(0)
        assert second >= first

    def test_register_creates_state_anchored_to_the_second(
        self, store: Store, namespace: str
    ) -> None:
        """A new entry gets anchor = registration instant truncated to the second, no last
        window."""
        before = store.clock()
        registration = store.register(namespace, definitions("a", "b"), REPLICA)
        assert registration.changed == {}
        states = store.states(namespace)
        assert set(states) == {"a", "b"}
        state = states["a"]
        assert state.last_window is None
        assert state.anchor == state.defined_at.replace(microsecond=0)
        assert state.defined_at >= before
        assert state.decided_until == state.defined_at

    def test_register_same_definition_changes_nothing(self, store: Store, namespace: str) -> None:
        """Registering an unchanged definition again (a restart) keeps the shared state."""
        first = registered(store, namespace, definitions("a"), REPLICA)["a"]
        again = store.register(namespace, definitions("a"), OTHER)
        assert again.changed == {}
        assert store.states(namespace)["a"] == first

    def test_changed_arguments_keep_windows_but_are_reported(
        self, store: Store, namespace: str
    ) -> None:
        """A new digest with the same schedule is reported and keeps defined_at and the anchor."""
        first = registered(store, namespace, definitions("a", digest="d1"), REPLICA)["a"]
        again = store.register(namespace, definitions("a", digest="d2"), OTHER)
        assert again.changed == {"a": "d1"}
        state = store.states(namespace)["a"]
        assert state.digest == "d2"
        assert state.defined_at == first.defined_at
        assert state.anchor == first.anchor

    def test_changed_schedule_moves_defined_at(self, store: Store, namespace: str) -> None:
        """A changed schedule text moves defined_at to now, so old windows cannot fire late."""
        first = registered(store, namespace, definitions("a", digest="d1"), REPLICA)["a"]
        changed = registered(
            store, namespace, definitions("a", schedule="every 2s", digest="d2"), OTHER
        )["a"]
        assert changed.schedule == "every 2s"
        assert changed.defined_at > first.defined_at
        assert changed.anchor == first.anchor

    def test_registering_again_never_reopens_a_claimed_window(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Unchanged definitions registered again, by a retry and by two replicas at once,
        move no entry's state back: anchor, defined_at and last window stay, and the windows
        claimed after it are new ones, each claimed once. 1,500 more entries make a store that
        registers in slices use more than one."""
        stores = [open_store(), open_store()]
        entry = every_tenth_of_a_second()
        planner = real_planner(entry, namespace)
        schedule = [entry.definition, *definitions(*(f"f{i}" for i in range(1500)))]
        first = registered(stores[0], namespace, schedule, REPLICA)
        assert len({(s.anchor, s.defined_at) for s in first.values()}) == 1
        tick_until_claimed(stores[0], namespace, planner)
        decided = stores[0].states(namespace)["e"]
        race(stores, lambda store, i: store.register(namespace, schedule, (REPLICA, OTHER)[i]))
        registration = stores[1].register(namespace, schedule, OTHER)  # a retry
        assert registration.changed == {}
        states = stores[1].states(namespace)
        assert {n: s.anchor for n, s in states.items()} == {n: s.anchor for n, s in first.items()}
        again = states["e"]
        assert (again.anchor, again.defined_at, again.last_window) == (
            decided.anchor,
            decided.defined_at,
            decided.last_window,
        )
        assert decided.last_window is not None
        assert tick_until_claimed(stores[1], namespace, planner).window > decided.last_window
        windows = [r.window for r in stores[0].history(namespace, "e", limit=10_000) if r.task_id]
        assert len(windows) == len(set(windows))

    def test_heartbeats_are_the_replicas_heartbeat_instants_newest_first(
        self, store: Store, namespace: str
    ) -> None:
        """heartbeats lists what replicas lists, only the instants, newest first; empty for a
        namespace without replicas."""
        assert store.heartbeats(namespace) == []
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        store.heartbeat(namespace, OTHER, "1.0", {"b": "d1"})
        assert store.heartbeats(namespace) == [r.heartbeat_at for r in store.replicas(namespace)]
        assert len(store.heartbeats(namespace)) == 2
        assert store.heartbeats(namespace) == sorted(store.heartbeats(namespace), reverse=True)

    def test_a_forgotten_replica_is_no_longer_listed(self, store: Store, namespace: str) -> None:
        """forget_replica (a clean stop) drops that replica at once, keeps the others, and may
        be called twice; a later heartbeat lists it again."""
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        store.heartbeat(namespace, OTHER, "1.0", {"a": "d1"})
        store.forget_replica(namespace, REPLICA)
        assert [r.replica for r in store.replicas(namespace)] == [OTHER.id]
        store.forget_replica(namespace, REPLICA)
        store.forget_replica(f"{namespace}-none", OTHER)
        assert [r.replica for r in store.replicas(namespace)] == [OTHER.id]
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        assert {r.replica for r in store.replicas(namespace)} == {REPLICA.id, OTHER.id}

    def test_namespaces_lists_those_with_registered_entries(
        self, store: Store, namespace: str
    ) -> None:
        """namespaces() lists, sorted, every namespace with a registered entry, and no other."""
        other, bare = f"{namespace}-b", f"{namespace}-c"
        assert namespace not in store.namespaces()
        store.register(other, definitions("b"), OTHER)
        store.register(namespace, definitions("a"), REPLICA)
        store.heartbeat(bare, REPLICA, "1.0", {})  # a heartbeat alone registers nothing
        found = store.namespaces()
        assert found == sorted(found)
        assert [n for n in found if n.startswith(namespace)] == [namespace, other]

    def test_heartbeats_list_live_replicas(self, store: Store, namespace: str) -> None:
        """A heartbeat upserts the replica: started_at stays, heartbeat_at and definitions
        update."""
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        [first] = store.replicas(namespace)
        store.heartbeat(namespace, REPLICA, "1.1", {"a": "d2", "b": "d3"})
        store.heartbeat(namespace, OTHER, "1.1", {})
        records = {r.replica: r for r in store.replicas(namespace)}
        assert set(records) == {REPLICA.id, OTHER.id}
        mine = records[REPLICA.id]
        assert mine.started_at == first.started_at
        assert mine.heartbeat_at >= first.heartbeat_at
        assert (mine.host, mine.pid, mine.version) == (REPLICA.host, REPLICA.pid, "1.1")
        assert dict(mine.definitions) == {"a": "d2", "b": "d3"}

    def test_a_heartbeat_without_definitions_keeps_them_and_refreshes_liveness(
        self, store: Store, namespace: str
    ) -> None:
        """A heartbeat with None (the digests did not change) says the record is there, moves
        its heartbeat_at to store now and keeps its definitions, version and started_at."""
        assert store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1", "b": "d2"}) is True
        [first] = store.replicas(namespace)
        between = store.clock()
        assert store.heartbeat(namespace, REPLICA, "1.1", None) is True
        [mine] = store.replicas(namespace)
        assert mine.heartbeat_at >= between > first.heartbeat_at
        assert (mine.started_at, mine.version) == (first.started_at, "1.0")
        assert dict(mine.definitions) == {"a": "d1", "b": "d2"}

    def test_a_heartbeat_without_definitions_never_recreates_a_lost_record(
        self, store: Store, namespace: str
    ) -> None:
        """A store that lost the record (never written, pruned, forgotten) answers False to a
        heartbeat with None and lists nothing; the full heartbeat that follows lists it again."""
        assert store.heartbeat(namespace, REPLICA, "1.0", None) is False
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        store.prune(namespace, store.clock() + timedelta(seconds=1))
        assert store.heartbeat(namespace, REPLICA, "1.0", None) is False
        assert store.replicas(namespace) == []
        assert store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"}) is True
        assert [dict(r.definitions) for r in store.replicas(namespace)] == [{"a": "d1"}]

    def test_a_heartbeat_with_changes_applies_them_to_the_stored_definitions(
        self, store: Store, namespace: str
    ) -> None:
        """A heartbeat with `removed` (a delta) sets the digests it carries, drops the
        removed names, keeps the other definitions and started_at, records the version and
        moves heartbeat_at; an empty delta only refreshes liveness; the full form still
        replaces the whole map."""
        full = {"a": "d1", "b": "d2", "c": "d3"}
        assert store.heartbeat(namespace, REPLICA, "1.0", full) is True
        [first] = store.replicas(namespace)
        between = store.clock()
        changed = {"b": "d9", "n": "d4"}
        assert store.heartbeat(namespace, REPLICA, "1.1", changed, removed=["c"]) is True
        [mine] = store.replicas(namespace)
        assert dict(mine.definitions) == {"a": "d1", "b": "d9", "n": "d4"}
        assert (mine.started_at, mine.version) == (first.started_at, "1.1")
        assert mine.heartbeat_at >= between > first.heartbeat_at
        assert store.heartbeat(namespace, REPLICA, "1.1", {}, removed=["a", "gone"]) is True
        assert store.heartbeat(namespace, REPLICA, "1.1", None, removed=[]) is True
        [mine] = store.replicas(namespace)
        assert dict(mine.definitions) == {"b": "d9", "n": "d4"}
        assert store.heartbeat(namespace, REPLICA, "1.1", {}, removed=["b", "n"]) is True
        assert [dict(r.definitions) for r in store.replicas(namespace)] == [{}]
        assert store.heartbeat(namespace, REPLICA, "1.1", {"z": "d5"}) is True
        assert [dict(r.definitions) for r in store.replicas(namespace)] == [{"z": "d5"}]

    def test_a_heartbeat_with_changes_never_recreates_a_lost_record(
        self, store: Store, namespace: str
    ) -> None:
        """A delta to a record the store lost (never written, pruned, forgotten) answers
        False and writes nothing, never a partial map; the full heartbeat lists it again."""
        assert store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"}, removed=[]) is False
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1", "b": "d2"})
        store.heartbeat(namespace, OTHER, "1.0", {"a": "d1"})
        store.forget_replica(namespace, REPLICA)
        assert store.heartbeat(namespace, REPLICA, "1.0", {"b": "d3"}, removed=["a"]) is False
        assert [r.replica for r in store.replicas(namespace)] == [OTHER.id]
        store.prune(namespace, store.clock() + timedelta(seconds=1))
        assert store.heartbeat(namespace, OTHER, "1.0", {"c": "d1"}, removed=[]) is False
        assert store.replicas(namespace) == []
        assert store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1", "b": "d3"}) is True
        assert [dict(r.definitions) for r in store.replicas(namespace)] == [{"a": "d1", "b": "d3"}]
