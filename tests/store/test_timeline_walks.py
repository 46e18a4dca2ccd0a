"""Random walks over everything that writes a conversation's timeline, checked against what
the store said at each step.

Each walk mixes appends, prepared requests (which may truncate and rewrite), usage records,
explicit truncations, block rewrites, checkpoints, rollbacks, restores and forks. The
oracle is the store's own earlier answers: every view rendered after a step (in each
format) must render the same as of that step's moment for as long as the rows it was built
from are there, every prepared request must rebuild to the payload that was returned, and a
fork must render as its parent did at the fork's moment. A refused step must change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextstore import ContextStore, ContextStoreError
from tests.conftest import StoreFactory, assistant, tool_result, tool_use, user

FORMATS = ("anthropic", "openai", "gemini")
WINDOW = 64_000
"""The conversation's context window: a recorded request of :data:`FULL` tokens is over
its limit, so the next prepare truncates."""
FULL = 60_000

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("prepare"), st.tuples(st.sampled_from(FORMATS), st.booleans())),
        st.tuples(st.just("usage"), st.just(100)),
        st.tuples(st.just("truncate"), st.sampled_from(("half", "quarter", "last_two"))),
        st.tuples(st.just("rewrite"), st.integers(0, 40)),
        st.tuples(st.just("checkpoint"), st.none()),
        st.tuples(st.just("rollback"), st.tuples(st.integers(0, 5), st.booleans())),
        st.tuples(st.just("restore"), st.none()),
        st.tuples(st.just("fork"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=20,
)

Views = dict[str, list[dict[str, Any]]]


@dataclass
class Walk:
    """What the store said so far, and what a rollback set aside."""

    store: ContextStore
    cid: str
    seen: list[tuple[int, Views]] = field(default_factory=list)
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)
    forks: list[tuple[str, Views]] = field(default_factory=list)
    set_aside: dict[int, tuple[int, int, list[tuple[int, Views]], dict[int, Any]]] = field(
        default_factory=dict
    )
    """Per rollback id: its cutoff, the clock after it, and the views and payloads it
    removed (a restore brings them back)."""

    def now(self) -> int:
        return self.store.get_conversation(self.cid).last_ts

    def views(self, cid: str | None = None, as_of: int | None = None) -> Views:
        return {f: self.store.render(cid or self.cid, as_of=as_of, format=f) for f in FORMATS}


def _step(walk: Walk, op: str, arg: Any, turn: int) -> None:
    store, cid = walk.store, walk.cid
    count = len(store.messages(cid))
    if op == "append":
        batch: list[dict[str, Any]] = []
        for i in range(arg):
            call = f"t{turn}-{i}"
            batch += [
                assistant(f"step {turn}.{i}", tool_use(call, path=f"src/f{i}.py")),
                user(tool_result(call, f"contents {turn}.{i}\n" * 20)),
            ]
        batch.append(assistant(f"done {turn}"))
        batch.append(user(f"next {turn}"))
        store.append(cid, batch)
    elif op == "prepare":
        chosen, over = arg
        if over:  # the last request filled the window: this prepare truncates
            store.record_request(cid, tokens_in=FULL, tokens_out=10)
        prepared = store.prepare_request(cid, system="be brief", format=chosen)
        assert prepared.request_id is not None
        walk.payloads[prepared.request_id] = prepared.payload
    elif op == "usage":
        store.record_request(cid, tokens_in=arg, tokens_out=10)
    elif op == "truncate":
        store.truncate(cid, keep=arg)
    elif op == "rewrite" and count:
        store.add_context_update(cid, arg % count, 0, f"rewritten at {turn}", mode="block")
    elif op == "checkpoint":
        store.checkpoint(cid, f"cp{turn}")
    elif op == "rollback":
        points = store.checkpoints(cid)
        if points:
            choice, undo = arg
            cutoff = points[choice % len(points)].ts
            report = store.rollback(cid, cutoff)
            if report.rollback_id is None:  # nothing after the moment: no rollback ran
                assert not any(report.removed.values()) and not report.archived
                return
            gone = [(t, v) for t, v in walk.seen if t > cutoff]
            walk.seen = [(t, v) for t, v in walk.seen if t <= cutoff]
            removed = {r: p for r, p in walk.payloads.items() if r not in _request_ids(walk)}
            walk.payloads = {r: p for r, p in walk.payloads.items() if r not in removed}
            walk.set_aside[report.rollback_id] = (cutoff, walk.now(), gone, removed)
            if undo:  # the user changed their mind at once
                walk.seen.append((walk.now(), walk.views()))
                _step(walk, "restore", None, turn)
    elif op == "restore" and walk.set_aside:
        rollback_id = max(walk.set_aside)
        cutoff, after, gone, removed = walk.set_aside.pop(rollback_id)
        store.restore(cid, rollback_id)
        # The moments between the rollback and the restore now hold the restored rows.
        walk.seen = [(t, v) for t, v in walk.seen if t < after] + gone
        walk.payloads.update(removed)
    elif op == "fork" and walk.seen:
        at, views = walk.seen[arg % len(walk.seen)]
        fork = store.fork(cid, at=at)
        walk.forks.append((fork.id, views))


def _request_ids(walk: Walk) -> set[int]:
    return {r.id for r in walk.store.requests(walk.cid)}


def _check(walk: Walk) -> None:
    for stamp, views in walk.seen:
        assert walk.views(as_of=stamp) == views, f"as of {stamp}"
    for request_id, payload in walk.payloads.items():
        assert walk.store.request_payload(walk.cid, request_id) == payload
    for fork_id, views in walk.forks:
        assert walk.views(fork_id) == views


@example(
    steps=[
        ("checkpoint", None),
        ("rewrite", 1),
        ("prepare", ("openai", True)),
        ("rollback", (0, True)),
    ]
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_every_answer_stays_true_while_its_rows_are_there(
    fresh_store: StoreFactory, steps: list[tuple[str, Any]]
) -> None:
    with fresh_store() as store:
        conv = store.create_conversation(context_window=WINDOW)
        store.append(conv.id, [user("task"), assistant("first"), user("go on")])
        walk = Walk(store, conv.id)
        walk.seen.append((walk.now(), walk.views()))
        for turn, (op, arg) in enumerate(steps):
            before = walk.views()
            try:
                _step(walk, op, arg, turn)
            except ContextStoreError:
                assert walk.views() == before, f"refused {op} changed the view"
                continue
            walk.seen.append((walk.now(), walk.views()))
            if op in ("rollback", "restore", "fork"):
                _check(walk)
        _check(walk)
