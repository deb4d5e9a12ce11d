"""Taking over claims left unsent: stale claims, take-over passes, claims handed back."""

from __future__ import annotations

from datetime import datetime, timedelta

from safebeat.identity import Replica, task_id_for
from safebeat.stores.protocols import Claim, NewClaim, Reclaim, Status, Store, TickPlan
from safebeat.testing.stores.support import (
    HOUR,
    OTHER,
    REPLICA,
    OnlyMembership,
    claim_plan,
    claimed,
    definitions,
    registered,
    returning,
    stale_claims_of,
    start,
    take_over,
    take_over_pass,
    window_after,
)


class TakeOverCases:
    """The contract's cases on taking over unsent claims; `StoreContract` runs them."""

    def test_stale_claims_are_taken_over_once(self, store: Store, namespace: str) -> None:
        """An unsent claim past the timeout is handed to one replica, with attempts counted."""
        state = registered(store, namespace, definitions("a", "b"), REPLICA)["a"]
        window = window_after(state, 1)
        store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, window),
            replica=REPLICA,
        )

        def tick(who: Replica, timeout: timedelta | None, names: list[str]) -> list[object]:
            reclaim = None if timeout is None else Reclaim(names, timeout)
            result = store.tick(
                namespace, names, lambda now, s: TickPlan(), replica=who, reclaim=reclaim
            )
            assert result is not None
            return list(result.reclaimed)

        assert tick(OTHER, None, ["a"]) == []
        assert tick(OTHER, timedelta(hours=1), ["a"]) == []
        assert tick(OTHER, timedelta(0), ["b"]) == []  # only entries this replica knows
        [taken] = tick(OTHER, timedelta(0), ["a"])
        assert (taken.entry, taken.window, taken.attempts) == ("a", window, 2)  # type: ignore[attr-defined]
        assert taken.task_id == task_id_for(namespace, "a", window)  # type: ignore[attr-defined]
        assert tick(REPLICA, timedelta(seconds=30), ["a"]) == []  # fresh again after the takeover
        [row] = store.history(namespace, "a")
        assert (row.replica, row.host, row.pid) == (OTHER.id, OTHER.host, OTHER.pid)

    def test_a_take_over_pass_finds_stale_claims_without_the_entry_list(
        self, store: Store, namespace: str
    ) -> None:
        """The take-over finds the namespace's stale claims itself, oldest first, and only asks
        `in defines` of their entries: what it costs follows the stale claims, never the entries
        a replica defines; a claim of an entry the replica does not define stays for another."""
        idle = [f"idle-{i}" for i in range(50)]
        states = registered(store, namespace, definitions("a", "b", "c", *idle), REPLICA)
        for name in ("a", "b", "c"):  # handed back in this order: a is the oldest
            window = window_after(states[name], 1)
            result = store.tick(
                namespace,
                [name],
                returning(claim_plan(name, namespace, window)),
                replica=REPLICA,
            )
            assert result is not None
            store.release_claims(namespace, result.claimed, replica=REPLICA, timeout=HOUR)

        def take_over(defines: OnlyMembership, limit: int = 1000) -> list[str]:
            result = store.tick(
                namespace,
                [],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim(defines, HOUR, limit),
            )
            assert result is not None
            return [claim.entry for claim in result.reclaimed]

        defines = OnlyMembership(["a", "c", *idle])
        assert take_over(defines, limit=1) == ["a"]  # the oldest of those it defines
        assert set(defines.asked) <= {"a", "b", "c"}  # never the idle entries
        assert take_over(OnlyMembership(["a", "c", *idle])) == ["c"]  # a is fresh again
        assert take_over(OnlyMembership(["b"])) == ["b"]  # left for a replica defining it

    def test_a_take_over_pass_reads_a_page_and_the_next_goes_on_after_it(
        self, store: Store, namespace: str
    ) -> None:
        """A pass reads at most `page` stale claims and takes at most `limit`; passes that go
        on from where the last ended (`ReclaimPage.resume`) reach a stale claim of an entry
        the replica defines behind more stale claims of entries nobody defines than a page
        holds, within the pages needed plus one, then start from the oldest again."""
        gone = [f"gone-{i}" for i in range(3)]
        states = registered(store, namespace, definitions("mine", *gone), REPLICA)
        for name in gone:  # 12 stale claims nobody takes, in 3 instants of 4 claims
            stale_claims_of(store, namespace, states[name], 4, timeout=HOUR)
        [mine] = stale_claims_of(store, namespace, states["mine"], 1, timeout=HOUR)
        page, limit = 5, 2
        after = None
        reads: list[int] = []
        taken: list[Claim] = []
        for _ in range(12 // page + 1 + 1):
            result = take_over_pass(store, namespace, Reclaim({"mine"}, HOUR, limit, page, after))
            assert result.reclaim_page.read <= page
            assert len(result.reclaimed) <= limit
            reads.append(result.reclaim_page.read)
            taken.extend(result.reclaimed)
            after = result.reclaim_page.resume
            if taken:
                break
        assert [(c.id, c.entry, c.attempts) for c in taken] == [(mine.id, "mine", 2)]
        assert reads == [5, 5, 3]  # the gone claims a page at a time, then the rest and mine
        assert after is None  # read to the end: the next pass starts from the oldest again
        again = take_over_pass(store, namespace, Reclaim({"mine"}, HOUR, limit, page, after))
        assert (again.reclaimed, again.reclaim_page.read) == ([], 5)

    def test_a_take_over_pass_that_reaches_its_limit_leaves_the_rest_of_its_page_to_the_next(
        self, store: Store, namespace: str
    ) -> None:
        """A pass that takes `limit` claims ends at the last one it took, so the next pass
        takes the stale claims after it in the same page, oldest first: none waits for the
        passes to come round again."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        stale = stale_claims_of(store, namespace, state, 6, timeout=HOUR)
        after = None
        passes: list[list[datetime]] = []
        for _ in range(3):
            result = store.tick(
                namespace,
                [],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim({"a"}, HOUR, limit=2, page=5, after=after),
            )
            assert result is not None
            assert result.reclaim_page is not None
            passes.append([claim.window for claim in result.reclaimed])
            after = result.reclaim_page.resume
        windows = sorted(claim.window for claim in stale)
        assert passes == [windows[0:2], windows[2:4], windows[4:6]]

    def test_a_dead_run_claimed_before_the_place_the_passes_reached_is_taken_when_they_come_round(
        self, store: Store, namespace: str
    ) -> None:
        """A run whose lease expired after the passes went past its claim time is not in the
        pages after their place; the pass after a short page starts from the oldest again
        and takes it over."""
        states = registered(store, namespace, definitions("a", "gone"), REPLICA)
        window = window_after(states["a"], 1)
        result = store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, window), replica=REPLICA
        )
        assert result is not None
        store.record_publish(namespace, [c.id for c in result.claimed], {})
        gone = [window_after(states["gone"], n) for n in range(1, 7)]
        store.tick(
            namespace,
            ["gone"],
            lambda now, s: claim_plan("gone", namespace, *gone),
            replica=REPLICA,
        )
        after = None

        def take_over() -> tuple[list[datetime], int]:
            nonlocal after
            result = store.tick(
                namespace,
                [],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim({"a"}, timedelta(0), limit=2, page=5, after=after),
            )
            assert result is not None
            assert result.reclaim_page is not None
            after = result.reclaim_page.resume
            return [claim.window for claim in result.reclaimed], result.reclaim_page.read

        assert take_over() == ([], 5)  # five of the six unsent claims nobody defines
        start(store, namespace, window, lease=timedelta(0))  # its run dies at once
        assert take_over() == ([], 1)  # the sixth: a short page, so the passes come round
        assert take_over() == ([window], 5)  # the dead run first, claimed before the others

    def test_extra_claims_left_unsent_are_taken_over_by_a_tick(
        self, store: Store, namespace: str
    ) -> None:
        """A triggered claim nobody published is re-published by the next reclaim, same task id."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        window = window_after(state, 1) + timedelta(microseconds=250)
        [claim] = store.claim_extra(
            namespace,
            [NewClaim("a", window, task_id_for(namespace, "a", window), "tasks.run")],
            replica=OTHER,
            reason="trigger",
        )
        result = store.tick(
            namespace,
            [],
            lambda now, s: TickPlan(),
            replica=REPLICA,
            reclaim=Reclaim(["a"], timedelta(0)),
        )
        assert result is not None
        assert [(c.id, c.window, c.task_id, c.attempts) for c in result.reclaimed] == [
            (claim.id, window, claim.task_id, 2)
        ]

    def test_claims_handed_back_are_taken_over_by_the_next_tick_of_any_replica(
        self, store: Store, namespace: str
    ) -> None:
        """A claim its replica hands back is stale at once for the take-over rule: the next tick
        of another replica takes it over with the same task id, counting the attempt; the
        claims not handed back still wait the timeout."""
        first, _still_waiting = claimed(store, namespace, "a", 1, 2)
        assert store.release_claims(namespace, [first], replica=REPLICA, timeout=HOUR) == 1
        [row] = [r for r in store.history(namespace, "a") if r.window == first.window]
        assert row.status is Status.CLAIMED
        assert row.claimed_at < store.clock() - HOUR
        [taken] = take_over(store, namespace, OTHER, HOUR)
        assert (taken.id, taken.window, taken.task_id) == (first.id, first.window, first.task_id)
        assert taken.attempts == 2
        assert take_over(store, namespace, REPLICA, HOUR) == []  # fresh again after the take-over

    def test_only_the_claimers_own_unsent_claims_are_handed_back(
        self, store: Store, namespace: str
    ) -> None:
        """Release is fenced: a claim recorded sent or failed, another replica's claim, and a claim
        taken over since (by anyone: its attempt moved on) are left as they are."""
        sent, failed, taken, kept = claimed(store, namespace, "a", 1, 2, 3, 4)
        store.record_publish(namespace, [sent.id], {failed.id: "EncodeError: bad kwargs"})
        assert store.release_claims(namespace, [sent, failed], replica=REPLICA, timeout=HOUR) == 0
        assert store.release_claims(namespace, [taken, kept], replica=OTHER, timeout=HOUR) == 0
        retaken = take_over(store, namespace, REPLICA, timedelta(0))
        assert [c.window for c in retaken] == [taken.window, kept.window]
        # REPLICA's first attempt of them is over: handing that attempt back changes nothing.
        assert store.release_claims(namespace, [taken, kept], replica=REPLICA, timeout=HOUR) == 0
        assert take_over(store, namespace, OTHER, HOUR) == []
        assert store.release_claims(namespace, retaken[1:], replica=REPLICA, timeout=HOUR) == 1
        [again] = take_over(store, namespace, OTHER, HOUR)
        assert (again.window, again.attempts) == (kept.window, 3)
        rows = {r.window: r.status for r in store.history(namespace, "a")}
        assert rows[sent.window] is Status.SENT
        assert rows[failed.window] is Status.FAILED
