"""Pauses seen by every replica, the audit trail, and forgetting an entry."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

from safebeat.identity import task_id_for
from safebeat.records import Pause
from safebeat.stores.protocols import AuditAction, AuditEvent, EntryState, NewClaim, Store, TickPlan
from safebeat.testing.stores.support import (
    HOUR,
    OTHER,
    REPLICA,
    SECOND,
    StoreFactory,
    claim_plan,
    definitions,
    dispatched,
    registered,
    start,
    window_after,
)


class PauseAndAuditCases:
    """The contract's cases on pauses and the audit trail; `StoreContract` runs them."""

    def test_a_pause_is_seen_by_every_replica_and_outlives_registration(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """set_paused flags the entry for all replicas; registering again keeps the flag."""
        store, other = open_store(), open_store()
        store.register(namespace, definitions("a", "b"), REPLICA)
        assert store.set_paused(namespace, "a", Pause(True))
        assert other.states(namespace)["a"].paused
        assert not other.states(namespace)["b"].paused
        seen: dict[str, bool] = {}

        def planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            seen.update({name: state.paused for name, state in states.items()})
            return TickPlan()

        other.tick(namespace, ["a", "b"], planner, replica=OTHER)
        assert seen == {"a": True, "b": False}
        again = registered(
            other, namespace, definitions("a", schedule="every 2s", digest="d2"), OTHER
        )
        assert again["a"].paused
        assert other.set_paused(namespace, "a", Pause(False))
        assert not store.states(namespace)["a"].paused
        assert not store.set_paused(namespace, "no-such-entry", Pause(True))

    def test_the_state_of_one_entry_is_what_states_gives_for_it(
        self, store: Store, namespace: str
    ) -> None:
        """state() reads one entry: its pause, running and queued columns as states() has
        them; None for a name that is not registered."""
        window = dispatched(store, namespace)
        store.register(namespace, definitions("a", "b"), REPLICA)
        assert store.set_paused(namespace, "b", Pause(True, note="one entry"))
        start(store, namespace, window)
        every = store.states(namespace)
        assert store.state(namespace, "a") == every["a"]
        assert store.state(namespace, "b") == every["b"]
        assert every["a"].running_since is not None
        assert every["b"].paused
        assert store.state(namespace, "no-such-entry") is None
        assert store.state(f"{namespace}-other", "a") is None

    def test_a_pause_with_an_end_and_a_note_is_seen_by_every_replica_and_cleared_by_resume(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """set_paused keeps a pause's end and note for every replica's states, register and tick
        loads; a restart keeps them; resuming clears them (a resume's note is not stored)."""
        store, other = open_store(), open_store()
        store.register(namespace, definitions("a", "b"), REPLICA)
        until = datetime(2031, 5, 4, 3, 2, 1, 123456, tzinfo=timezone.utc)
        assert store.set_paused(
            namespace, "a", Pause(True, until=until, note="migrating the mailer")
        )
        state = other.states(namespace)["a"]
        assert (state.paused, state.paused_until, state.pause_note) == (
            True,
            until,
            "migrating the mailer",
        )
        seen: dict[str, tuple[datetime | None, str | None]] = {}

        def planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            seen.update({n: (s.paused_until, s.pause_note) for n, s in states.items()})
            return TickPlan()

        other.tick(namespace, ["a", "b"], planner, replica=OTHER)
        assert seen == {"a": (until, "migrating the mailer"), "b": (None, None)}
        again = registered(
            other, namespace, definitions("a", schedule="every 2s", digest="d2"), OTHER
        )
        assert again["a"].paused_until == until
        assert store.set_paused(namespace, "a", Pause(False, until=until, note="mailer moved"))
        resumed = other.states(namespace)["a"]
        assert (resumed.paused, resumed.paused_until, resumed.pause_note) == (False, None, None)

    def test_a_pause_whose_end_passed_is_over_at_the_store_clock(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """A pause whose end is before the store's now reads as not paused at that now, and one
        whose end is later as paused, with no write in between."""
        store = open_store()
        store.register(namespace, definitions("a", "b"), REPLICA)
        now = store.clock()
        store.set_paused(namespace, "a", Pause(True, until=now - SECOND))
        store.set_paused(namespace, "b", Pause(True, until=now + HOUR))
        states = store.states(namespace)
        later = store.clock()
        assert not states["a"].paused_at(later)
        assert states["b"].paused_at(later)

    def test_the_audit_trail_records_actions_at_store_time_newest_first(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """record_audit stamps each action with the store clock; audit lists them newest first,
        with every field as recorded, for every replica, filtered by entry and limited."""
        store, other = open_store(), open_store()
        window = datetime(2026, 3, 1, 6, 0, 0, 250000, tzinfo=timezone.utc)
        before = store.clock()
        first = store.record_audit(
            namespace, AuditEvent("alice@ops-1", AuditAction.PAUSE, "report", (), "bad data")
        )
        second = store.record_audit(
            namespace,
            AuditEvent("bob", AuditAction.BACKFILL, "invoices", (window, window + HOUR), None),
        )
        third = store.record_audit(namespace, AuditEvent("carol", AuditAction.MIGRATE))
        assert before <= first.at <= second.at <= third.at <= store.clock()
        assert first.id < second.id < third.id
        assert other.audit(namespace) == [third, second, first]
        assert other.audit(namespace, "invoices") == [second]
        assert second.windows == (window, window + HOUR)
        assert (first.actor, first.action, first.entry, first.note) == (
            "alice@ops-1",
            AuditAction.PAUSE,
            "report",
            "bad data",
        )
        assert (third.entry, third.windows, third.note) == (None, (), None)
        assert other.audit(namespace, limit=2) == [third, second]
        assert other.audit(namespace + "-other") == []

    def test_prune_deletes_audit_records_made_before_the_cutoff(
        self, store: Store, namespace: str
    ) -> None:
        """Prune drops audit records older than its cutoff (safebeat_retention) and keeps newer
        ones, without counting them among the rows it reports."""
        old = store.record_audit(namespace, AuditEvent("a", AuditAction.TRIGGER, "x"))
        assert store.prune(namespace, old.at) == 0
        assert store.audit(namespace) == [old]
        cutoff = old.at + timedelta(microseconds=1)
        while store.clock() <= cutoff:  # the next record is made after the cutoff
            pass
        newer = store.record_audit(namespace, AuditEvent("b", AuditAction.RESUME, "x"))
        assert store.prune(namespace, cutoff) == 0
        assert store.audit(namespace) == [newer]
        assert store.audit(namespace, "x") == [newer]

    def test_forgetting_an_entry_drops_its_state_keeps_its_history_and_others(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """forget_entry removes one entry's state for every replica; its dispatch rows stay, so
        its decided windows are never claimed again; registering it again starts it anew."""
        store, other = open_store(), open_store()
        state = registered(store, namespace, definitions("a", "b"), REPLICA)["a"]
        window = window_after(state, 1)
        store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, window), replica=REPLICA
        )
        store.set_paused(namespace, "a", Pause(True))
        assert other.forget_entry(namespace, "a")
        assert sorted(store.states(namespace)) == ["b"]
        assert [r.window for r in store.history(namespace, "a")] == [window]
        assert not store.forget_entry(namespace, "a")
        assert not store.forget_entry(namespace, "no-such-entry")
        again = registered(store, namespace, definitions("a", digest="d2"), REPLICA)["a"]
        assert not again.paused
        assert again.digest == "d2"
        assert again.last_window is None
        repeat = store.claim_extra(
            namespace,
            [NewClaim("a", window, task_id_for(namespace, "a", window), "t")],
            replica=REPLICA,
            reason="trigger",
        )
        assert repeat == []
