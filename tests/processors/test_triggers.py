"""Triggers and dependencies: processors run in dependency order, each given only the nodes
its trigger fired for since its last run; runs are recorded as rows, stale drops with why."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import ContextStore, ContextStoreError, InvalidInputError
from contextstore.core.overlays import BlockUpdate, UpdateKind, block_text, text_hash
from contextstore.processors import IndexedView, Pipeline
from contextstore.processors.base import iter_blocks
from contextstore.processors.triggers import Trigger, dependency_order, fire, processor_key
from tests.conftest import assistant, user


class Counting:
    """Upper-cases texts containing ``word``; counts the blocks it is given."""

    independent = True

    def __init__(self, name: str, word: str, trigger: Any = None, depends_on: Any = ()) -> None:
        self.name, self.word = name, word
        if trigger is not None:
            self.trigger = trigger
        self.depends_on = depends_on
        self.given: list[int] = []
        self.calls: list[str] = []

    def config(self) -> dict[str, Any]:
        return {"word": self.word}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        self.calls.append(self.name)
        found = []
        for m, _, b, block in iter_blocks(view):
            self.given.append(m)
            current = block_text(block)
            if current is not None and self.word in current and current != current.upper():
                found.append(
                    BlockUpdate(
                        m,
                        b,
                        UpdateKind.PROCESSOR,
                        current.upper(),
                        self.name,
                        {},
                        text_hash(current),
                    )
                )
        return found


def _conversation(store: ContextStore, count: int) -> str:
    cid = store.create_conversation().id
    store.append(
        cid, [user(f"say {i}") if i % 2 == 0 else assistant(f"ok {i}") for i in range(count)]
    )
    return cid


def test_after_n_messages_one_more_gives_each_processor_one_message(store: ContextStore) -> None:
    counting = Counting("shout", "say", Trigger.new_message())
    pipeline = Pipeline([counting])
    cid = _conversation(store, 20)
    (first,) = store.run_processors(cid, pipeline=pipeline)
    assert len(counting.given) == 20 and first.nodes_given == 20 and first.outcome == "applied"
    counting.given.clear()
    store.append(cid, [user("say more")])
    (second,) = store.run_processors(cid, pipeline=pipeline)
    assert counting.given == [20]
    assert (second.nodes_given, second.first_message_idx, second.seen_through) == (1, 20, 20)
    counting.given.clear()
    assert store.run_processors(cid, pipeline=pipeline) == []  # nothing new: no run
    assert counting.given == []
    view = store.render(cid, pipeline=pipeline)
    assert counting.given == [] and view[20]["content"][0]["text"] == "SAY MORE"


def test_a_render_after_one_new_message_reads_only_that_message(store: ContextStore) -> None:
    counting = Counting("shout", "say", Trigger.new_message())
    pipeline = Pipeline([counting])
    cid = _conversation(store, 30)
    store.render(cid, pipeline=pipeline)
    assert len(counting.given) == 30
    counting.given.clear()
    store.append(cid, [assistant("say it")])
    view = store.render(cid, pipeline=pipeline)
    assert counting.given == [30] and view[30]["content"][0]["text"] == "SAY IT"
    assert view[0]["content"][0]["text"] == "SAY 0"  # the earlier result is reused, not lost


def test_processors_without_a_trigger_read_the_whole_view_every_time(store: ContextStore) -> None:
    legacy = Counting("legacy", "say")
    cid = _conversation(store, 6)
    store.run_processors(cid, pipeline=Pipeline([legacy]))
    store.append(cid, [user("say")])
    legacy.given.clear()
    store.run_processors(cid, pipeline=Pipeline([legacy]))
    assert legacy.given == list(range(7))


def test_dependency_order_and_cycles() -> None:
    a = Counting("a", "x", depends_on=("b",))
    b = Counting("b", "x", depends_on=("c",))
    c = Counting("c", "x")
    assert [p.name for p in dependency_order([a, b, c])] == ["c", "b", "a"]
    assert [p.name for p in Pipeline([a, b, c], parallel=True).ordered] == ["c", "b", "a"]
    c.depends_on = ("a",)
    with pytest.raises(InvalidInputError, match="a -> b -> c -> a"):
        Pipeline([a, b, c])
    with pytest.raises(InvalidInputError, match="does not have"):
        Pipeline([Counting("d", "x", depends_on=("nobody",))])


def test_a_dependent_reads_what_its_dependency_wrote(store: ContextStore) -> None:
    class Suffix(Counting):
        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            out = []
            for m, _, b, block in iter_blocks(view):
                current = block_text(block) or ""
                out.append(
                    BlockUpdate(
                        m, b, UpdateKind.PROCESSOR, current + "!", self.name, {}, text_hash(current)
                    )
                )
            return out

    after = Suffix("after", "", Trigger.new_message(), depends_on=("shout",))
    shout = Counting("shout", "say", Trigger.new_message())
    cid = _conversation(store, 4)
    # declared first, runs second: it sees the shouted text
    view = store.render(cid, pipeline=Pipeline([after, shout], parallel=True))
    assert view[0]["content"][0]["text"] == "SAY 0!"


def test_parallel_independent_processors_give_the_sequential_result(store: ContextStore) -> None:
    cid = _conversation(store, 12)

    def make() -> list[Counting]:
        return [
            Counting("p", "say", Trigger.new_message()),
            Counting("q", "ok", Trigger.new_message()),
        ]

    assert store.render(cid, pipeline=Pipeline(make(), parallel=True)) == store.render(
        cid, pipeline=Pipeline(make())
    )


def test_token_and_age_triggers_fire_on_stored_counts() -> None:
    counts = {i: 100 for i in range(10)}
    assert fire(Trigger.tokens_over(2000), list(range(10)), -1, tokens=counts) is None
    fired = fire(Trigger.tokens_over(500), list(range(10)), -1, tokens=counts)
    assert fired is not None and fired.messages == tuple(range(10))
    aged = fire(Trigger.aged_out(300), list(range(10)), -1, tokens=counts)
    assert aged is not None and aged.messages == tuple(range(6))  # 6..9 newer than 300 kept
    again = fire(
        Trigger.aged_out(300), list(range(11)), aged.seen_through, tokens=counts | {10: 100}
    )
    assert again is not None and again.messages == (6,)
    assert fire(Trigger.on_demand(), [0, 1], -1) is None
    assert fire(Trigger.on_demand(), [0, 1], -1, demanded=True) is not None


def test_on_demand_runs_only_when_asked(store: ContextStore) -> None:
    counting = Counting("shout", "say", Trigger.on_demand())
    pipeline = Pipeline([counting])
    cid = _conversation(store, 4)
    assert store.run_processors(cid, pipeline=pipeline) == []
    (run,) = store.run_processors(cid, pipeline=pipeline, demand=["shout"])
    assert run.trigger == "on_demand" and run.nodes_given == 4
    with pytest.raises(InvalidInputError, match=r"names of the pipeline \(shout\), got"):
        store.run_processors(cid, pipeline=pipeline, demand=["nobody"])
    with pytest.raises(InvalidInputError, match=r"names of the pipeline \(it has none\)"):
        store.run_processors(cid, pipeline=Pipeline([]), demand=["shout"])


class Stale:
    """Proposes a rewrite of message 0 against text it never read (a stale result)."""

    name = "stale"
    trigger = Trigger.new_message()

    def config(self) -> dict[str, Any]:
        return {}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        return [
            BlockUpdate(0, 0, UpdateKind.PROCESSOR, "late", self.name, {}, text_hash("older text"))
        ]


def test_processor_runs_record_applied_no_change_and_dropped_stale(store: ContextStore) -> None:
    cid = _conversation(store, 4)
    pipeline = Pipeline(
        [
            Counting("shout", "say", Trigger.new_message()),
            Stale(),
            Counting("quiet", "zzz", Trigger.new_message()),
        ]
    )
    store.prepare_request(cid, pipeline=pipeline)
    runs = {r.processor: r for r in store.processor_runs(cid)}
    assert runs["shout"].outcome == "applied" and runs["shout"].applied == 2
    assert runs["quiet"].outcome == "no_change" and runs["quiet"].reason is None
    stale = runs["stale"]
    assert stale.outcome == "dropped_stale" and stale.dropped == 1 and stale.applied == 0
    assert stale.reason is not None and "changed since it was read" in stale.reason
    assert stale.result["dropped"] == [{"node": [0, 0], "reason": stale.reason}]
    assert {r.ts for r in runs.values()} == {store.context_updates(cid)[-1]["ts"]}
    with store.database.read() as connection:
        from sqlalchemy import text

        rows = connection.execute(
            text(
                "SELECT processor, outcome, reason FROM processor_runs "
                "WHERE conversation_id = :c AND outcome = 'dropped_stale'"
            ),
            {"c": cid},
        ).all()
    assert [tuple(r) for r in rows] == [("stale", "dropped_stale", stale.reason)]


def test_a_failing_processor_is_recorded_and_nothing_else_is_written(store: ContextStore) -> None:
    class Broken(Counting):
        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            raise ContextStoreError("the hook is down")

    cid = _conversation(store, 4)
    pipeline = Pipeline(
        [
            Counting("shout", "say", Trigger.new_message()),
            Broken("broken", "", Trigger.new_message()),
        ]
    )
    with pytest.raises(ContextStoreError, match="hook is down"):
        store.run_processors(cid, pipeline=pipeline)
    (run,) = store.processor_runs(cid)
    assert (
        run.processor == "broken"
        and run.outcome == "failed"
        and "hook is down" in (run.reason or "")
    )
    assert (run.first_message_idx, run.last_message_idx, run.nodes_given) == (0, 3, 0)
    assert run.seen_through == -1  # it never ran before
    assert store.context_updates(cid) == []


def test_a_processor_raising_a_python_error_fails_as_a_store_error_everywhere(
    store: ContextStore,
) -> None:
    """A caller's processor that raised ValueError reached every caller as ValueError (an
    internal error on the command line); it is a ContextStoreError naming the processor, with
    the ValueError as its cause, and the recorded run keeps the processor's own words."""

    class Broken(Counting):
        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            raise ValueError("x" * 600)

    cid = _conversation(store, 4)
    pipeline = Pipeline([Broken("broken", "", Trigger.new_message())])
    for call in (
        lambda: store.render(cid, pipeline=pipeline),
        lambda: store.prepare_request(cid, pipeline=pipeline),
        lambda: store.run_processors(cid, pipeline=pipeline),
    ):
        with pytest.raises(ContextStoreError) as caught:
            call()
        assert type(caught.value) is ContextStoreError
        assert isinstance(caught.value.__cause__, ValueError)
        said = str(caught.value)
        assert said.startswith("the processor 'broken' failed (ValueError: xxx")
        assert "... (600 characters)); nothing it proposed was written" in said
    (run,) = store.processor_runs(cid)
    assert run.outcome == "failed" and run.reason == "ValueError: " + "x" * 600
    assert store.requests(cid) == [] and store.context_updates(cid) == []


def test_rollback_takes_processor_state_back(store: ContextStore) -> None:
    counting = Counting("shout", "say", Trigger.new_message())
    pipeline = Pipeline([counting])
    cid = _conversation(store, 4)
    cp = store.checkpoint(cid, "cp")
    store.append(cid, [user("say again")])
    store.run_processors(cid, pipeline=pipeline)
    report = store.rollback(cid, cp.ts)
    assert report.removed["processor_runs"] == 1 and store.context_updates(cid) == []
    counting.given.clear()
    (run,) = store.run_processors(cid, pipeline=pipeline)
    # the state went back with the rollback: messages 0..3 are due again; their results
    # for unchanged content come from the pipeline's memo, not from the processor
    assert (run.seen_through, run.result["reused"], run.nodes_given) == (3, 4, 0)
    assert counting.given == [] and len(store.context_updates(cid)) == 2
    pipeline.forget()
    store.rollback(cid, cp.ts)
    store.run_processors(cid, pipeline=pipeline)
    assert counting.given == [0, 1, 2, 3]


def test_a_processor_that_opts_out_of_the_memo_is_given_its_messages_again(
    store: ContextStore,
) -> None:
    counting = Counting("shout", "say", Trigger.new_message())
    counting.memoize = False  # type: ignore[attr-defined]
    pipeline = Pipeline([counting])
    cid = _conversation(store, 4)
    cp = store.checkpoint(cid, "cp")
    store.run_processors(cid, pipeline=pipeline)
    store.rollback(cid, cp.ts)
    counting.given.clear()
    (run,) = store.run_processors(cid, pipeline=pipeline)
    assert run.result["reused"] == 0 and counting.given == [0, 1, 2, 3]


def test_a_failed_run_records_how_far_the_last_good_run_had_seen(store: ContextStore) -> None:
    class FailsSecond(Counting):
        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            if self.calls:
                raise ContextStoreError("second call fails")
            return super().propose(view)

    flaky = FailsSecond("flaky", "say", Trigger.new_message())
    cid = _conversation(store, 4)
    store.run_processors(cid, pipeline=Pipeline([flaky]))
    store.append(cid, [user("say 4"), assistant("ok 5")])
    with pytest.raises(ContextStoreError, match="second call fails"):
        store.run_processors(cid, pipeline=Pipeline([flaky]))
    good, failed = sorted(store.processor_runs(cid), key=lambda run: run.id)
    assert good.outcome != "failed" and failed.outcome == "failed"
    assert failed.seen_through == good.seen_through == 3
    assert (failed.first_message_idx, failed.last_message_idx) == (4, 5)


def test_a_token_trigger_in_the_store_reads_the_stored_token_counts(store: ContextStore) -> None:
    cid = _conversation(store, 4)  # a few tokens per message
    quiet = Counting("quiet", "say", Trigger.tokens_over(10_000))
    loud = Counting("loud", "say", Trigger.tokens_over(1))
    store.run_processors(cid, pipeline=Pipeline([quiet, loud]))
    assert quiet.calls == [] and loud.calls == ["loud"]
    assert sorted(set(loud.given)) == [0, 1, 2, 3]


def test_a_new_message_trigger_is_given_old_messages_rewritten_from_outside_again() -> None:
    trigger = Trigger.new_message()
    again = fire(trigger, [0, 1, 2, 3], 3, rewritten=[1, 9])
    assert again is not None and (again.messages, again.seen_through) == ((1,), 3)
    both = fire(trigger, [0, 1, 2, 3, 4], 3, rewritten=[1])
    assert both is not None and (both.messages, both.seen_through) == ((1, 4), 4)
    assert fire(trigger, [0, 1, 2, 3], 3) is None


def test_a_manual_rewrite_after_a_prepare_is_masked_before_the_model_sees_it(
    store: ContextStore,
) -> None:
    # The masker had handled message 1 already; the rewrite's text is new to it.
    token = "npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    cid = store.create_conversation().id
    store.append(cid, [user("hello"), assistant("hi there")])
    store.prepare_request(cid, format="anthropic")
    store.add_context_update(cid, 1, 0, f"token is {token}", kind="manual", source="test")
    assert token not in str(store.render(cid, format="anthropic"))
    store.append(cid, "user", "go on")
    prepared = store.prepare_request(cid, format="anthropic")
    assert token not in str(prepared.payload)
    assert token not in str(store.request_payload(cid, prepared.request_id))
    assert "[REDACTED:npm_token]" in str(prepared.payload)


def test_a_config_that_is_not_json_is_refused_where_runs_are_keyed() -> None:
    # render said InvalidInputError, while prepare_request and run_processors (which key the
    # runs by the config) let json's TypeError out.
    class Changing:
        name = "changing"
        settings: dict[str, Any] = {}

        def config(self) -> dict[str, Any]:
            return self.settings

        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            return []

    processor = Changing()
    processor.settings = {"limit": object()}
    with pytest.raises(InvalidInputError, match="changing"):
        processor_key(processor, Trigger.every_render())
