"""A stateful model of the timeline's promises, across every reader of a past moment.

``test_timeline_walks.py`` checks renders and payloads along random walks. This machine
adds what it leaves out: every reader that takes ``as_of`` (``messages``,
``deleted_range``, ``viewed_messages``, ``nodes`` in both views, ``requests``,
``processor_runs``, ``context_updates``, ``message_count``) besides ``render``; several
conversations at once, forks of forks and deletions (nothing of one may change another);
rollbacks by label or by ``ts``, archived or purged, whose report must count exactly the
rows that disappeared (as its dry run said) and whose immediate restore gives back the
audit; prepares with a summarizer and auto-condense or a pipeline, processor runs, ranges
set by hand, model switches (not timeline rows: no view changes) and tool calls left
waiting. The model is the store's own earlier answers, kept per conversation and moment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from contextstore import ContextStore, ContextStoreError, RequestNotFoundError
from contextstore.processors.distill import Distiller
from contextstore.processors.pipeline import Pipeline
from contextstore.processors.trimming import OutputTrimmer
from tests.conftest import StoreFactory, assistant, tool_result, tool_use, user

FORMATS = ("anthropic", "openai", "gemini")
FULL = 60_000
"""A request total over a 64,000-token window's maximum: the next prepare truncates."""
USAGE = ("tokens_in", "tokens_out", "cache_writes", "cache_reads", "cost", "failure")
"""A request's usage, recorded on its row after it was prepared (not a past to keep)."""
IDS = ("id", "conversation_id")
"""Row ids, which a fork's copies do not share with their parent's rows."""

Moment = dict[str, Any]


def _pipeline() -> Pipeline:
    return Pipeline([OutputTrimmer(max_chars=300), Distiller()])


def _rows(records: list[Any], drop: tuple[str, ...] = IDS) -> list[dict[str, Any]]:
    return [
        {
            k: v
            for k, v in (r if isinstance(r, dict) else dataclasses.asdict(r)).items()
            if k not in drop
        }
        for r in records
    ]


def observe(store: ContextStore, cid: str, as_of: int | None) -> Moment:
    """Everything the store answers about conversation ``cid`` at ``as_of`` (None: now)."""
    seen: Moment = {f: store.render(cid, as_of=as_of, format=f) for f in FORMATS}
    seen["stored"] = store.render(cid, as_of=as_of)
    seen["messages"] = store.messages(cid, as_of=as_of)
    seen["range"] = store.deleted_range(cid, as_of=as_of)
    seen["count"] = store.message_count(cid, as_of=as_of)
    seen["viewed"] = _rows(store.viewed_messages(cid, as_of=as_of), ())
    seen["nodes"] = _rows(store.nodes(cid, as_of=as_of), ())
    seen["active"] = _rows(store.nodes(cid, view="active", as_of=as_of), ())
    seen["requests"] = _rows(store.requests(cid, as_of=as_of), IDS + USAGE)
    seen["runs"] = _rows(store.processor_runs(cid, as_of=as_of))
    seen["updates"] = _rows(store.context_updates(cid, as_of=as_of))
    seen["checkpoints"] = [
        (c.ts, c.label) for c in store.checkpoints(cid) if as_of is None or c.ts <= as_of
    ]
    return seen


def _audit(store: ContextStore, cid: str) -> dict[str, Any]:
    """The audit without its rollbacks and the clock, which a rollback and restore move."""
    report = dataclasses.asdict(store.audit(cid))
    del report["rollbacks"], report["conversation"]["last_ts"]
    return report


class Timeline(RuleBasedStateMachine):
    """Conversations of one store, each with the moments seen and the payloads returned."""

    def __init__(self, factory: StoreFactory) -> None:
        super().__init__()
        self._opened = factory()
        self.store: ContextStore = self._opened.__enter__()
        self.turn = 0
        self.conversations: list[str] = []
        self.seen: dict[str, list[tuple[int, Moment]]] = {}
        self.payloads: dict[str, dict[int, dict[str, Any]]] = {}
        self.set_aside: dict[tuple[str, int], tuple[int, list[Any], dict[int, Any]]] = {}
        """Per (conversation, rollback id): the clock after it, the moments and payloads
        it removed."""
        cid = self.store.create_conversation(context_window=64_000).id
        self.store.append(cid, [user("task"), assistant("first"), user("go on")])
        self._track(cid)

    def teardown(self) -> None:
        self._opened.__exit__(None, None, None)

    def _track(self, cid: str, inherited: list[tuple[int, Moment]] | None = None) -> None:
        self.conversations.append(cid)
        self.seen[cid] = list(inherited or [])
        self.payloads[cid] = {}
        self._remember(cid)

    def _now(self, cid: str) -> int:
        return self.store.get_conversation(cid).last_ts

    def _remember(self, cid: str) -> None:
        now = observe(self.store, cid, None)
        stamp = self._now(cid)
        assert observe(self.store, cid, stamp) == now, "as_of the clock differs from now"
        self.seen[cid].append((stamp, now))

    def _write(self, cid: str, call: Callable[[], Any]) -> Any:
        """Run a write on ``cid``: refused, it changes nothing; done, it changes no other
        conversation, and the moment after it is remembered."""
        before = {c: observe(self.store, c, None) for c in self.conversations}
        counts = self.store.row_counts()
        try:
            result = call()
        except ContextStoreError:
            assert {c: observe(self.store, c, None) for c in self.conversations} == before
            assert self.store.row_counts() == counts
            return None
        for other in self.conversations:
            if other != cid:
                assert observe(self.store, other, None) == before[other], f"{cid} leaked"
        self._remember(cid)
        return result

    def _pick(self, i: int) -> str:
        return self.conversations[i % len(self.conversations)]

    which = st.integers(0, 10)

    @rule(i=which, n=st.integers(1, 3), waiting=st.booleans())
    def append(self, i: int, n: int, waiting: bool) -> None:
        cid = self._pick(i)
        self.turn += 1
        last = self.store.messages(cid)[-1]
        calls = [
            b["id"]
            for b in (last["content"] if isinstance(last["content"], list) else [])
            if last["role"] == "assistant" and b.get("type") == "tool_use"
        ]
        batch = [user(*[tool_result(c, f"late {c} " * 30) for c in calls])] if calls else []
        for k in range(n):
            call = f"t{self.turn}-{k}"
            batch += [
                assistant(f"step {self.turn}.{k}", tool_use(call, path=f"src/f{k}.py")),
                user(tool_result(call, f"contents {self.turn}.{k} {'x' * 50}\n" * 20)),
            ]
        batch += [assistant(f"done {self.turn}"), user(f"next {self.turn}")]
        if waiting:
            batch.append(assistant("calling", tool_use(f"w{self.turn}", path="w.py")))
        self._write(cid, lambda: self.store.append(cid, batch))

    @rule(
        i=which,
        format=st.sampled_from(FORMATS),
        over=st.booleans(),
        summarize=st.booleans(),
        condense=st.sampled_from([None, 0.1, 0.5]),
        processors=st.booleans(),
    )
    def prepare(
        self, i: int, format: str, over: bool, summarize: bool, condense: Any, processors: bool
    ) -> None:
        cid = self._pick(i)
        if over:
            self._write(cid, lambda: self.store.record_request(cid, tokens_in=FULL))
        options: dict[str, Any] = {"auto_condense": condense}
        if summarize:
            options["summarizer"] = lambda hidden: f"summary of {len(hidden)} messages"
        if processors:
            options["pipeline"] = _pipeline()
        prepared = self._write(
            cid,
            lambda: self.store.prepare_request(cid, system="be brief", format=format, **options),
        )
        if prepared is not None:
            self.payloads[cid][prepared.request_id] = prepared.payload

    @rule(i=which, tokens=st.integers(0, 70_000))
    def usage(self, i: int, tokens: int) -> None:
        cid = self._pick(i)
        if self.payloads[cid]:
            newest = max(self.payloads[cid])
            self._write(
                cid, lambda: self.store.record_request(cid, request_id=newest, tokens_in=tokens)
            )

    @rule(
        i=which,
        keep=st.sampled_from(("none", "half", "quarter", "last_two")),
        summary=st.sampled_from([None, "a summary"]),
    )
    def truncate(self, i: int, keep: str, summary: str | None) -> None:
        cid = self._pick(i)
        self._write(cid, lambda: self.store.truncate(cid, keep=keep, summary=summary))

    @rule(i=which, end=st.integers(0, 60))
    def hide(self, i: int, end: int) -> None:
        cid = self._pick(i)
        self._write(cid, lambda: self.store.set_deleted_range(cid, end))

    @rule(
        i=which, m=st.integers(0, 60), b=st.integers(0, 1), mode=st.sampled_from(["block", "text"])
    )
    def rewrite(self, i: int, m: int, b: int, mode: str) -> None:
        cid = self._pick(i)
        count = self.store.message_count(cid)
        text = f"rewritten {self.turn}"
        self._write(cid, lambda: self.store.add_context_update(cid, m % count, b, text, mode=mode))

    @rule(i=which)
    def run_processors(self, i: int) -> None:
        cid = self._pick(i)
        self._write(cid, lambda: self.store.run_processors(cid, pipeline=_pipeline()))

    @rule(i=which, window=st.sampled_from([8_192, 64_000, 200_000]))
    def switch_model(self, i: int, window: int) -> None:
        cid = self._pick(i)
        before = observe(self.store, cid, None)
        self.store.set_conversation_model(cid, model_id=f"m{window}", context_window=window)
        assert observe(self.store, cid, None) == before

    @rule(i=which, label=st.sampled_from(["a", "b", "c"]))
    def checkpoint(self, i: int, label: str) -> None:
        cid = self._pick(i)
        self._write(cid, lambda: self.store.checkpoint(cid, label))

    @rule(
        i=which, j=st.integers(0, 50), purge=st.booleans(), by_ts=st.booleans(), undo=st.booleans()
    )
    def rollback(self, i: int, j: int, purge: bool, by_ts: bool, undo: bool) -> None:
        cid = self._pick(i)
        labels = [c.label for c in self.store.checkpoints(cid)]
        if by_ts or not labels:
            to: str | int = self.seen[cid][j % len(self.seen[cid])][0]
        else:
            to = str(labels[j % len(labels)])
        counts, audit = self.store.row_counts(cid), _audit(self.store, cid)
        preview = self.store.rollback(cid, to, dry_run=True)
        report = self._write(cid, lambda: self.store.rollback(cid, to, purge=purge))
        if report is None:
            return
        after = self.store.row_counts(cid)
        assert {t: counts[t] - after[t] for t in report.removed} == dict(report.removed)
        assert preview.removed == report.removed and preview.cutoff_ts == report.cutoff_ts
        now = self._now(cid)
        gone = [(t, m) for t, m in self.seen[cid] if report.cutoff_ts < t < now]
        self.seen[cid] = [(t, m) for t, m in self.seen[cid] if t <= report.cutoff_ts or t == now]
        live = {r.id for r in self.store.requests(cid)}
        removed = {r: p for r, p in self.payloads[cid].items() if r not in live}
        for request_id in removed:
            with pytest.raises(RequestNotFoundError):
                self.store.request_payload(cid, request_id)
            del self.payloads[cid][request_id]
        if purge:
            return
        self.set_aside[(cid, report.rollback_id)] = (now, gone, removed)
        if undo and self._restore(cid, report.rollback_id):
            assert self.store.row_counts(cid) == {**counts, "rollbacks": after["rollbacks"]}
            assert _audit(self.store, cid) == audit

    def _restore(self, cid: str, rollback_id: int) -> bool:
        ran_at, gone, removed = self.set_aside[(cid, rollback_id)]
        if self._write(cid, lambda: self.store.restore(cid, rollback_id)) is None:
            return False
        del self.set_aside[(cid, rollback_id)]
        # The moments from the rollback on held the archived rows' absence; now they hold them.
        restored = self.seen[cid][-1]
        kept = [(t, m) for t, m in self.seen[cid][:-1] if t < ran_at]
        self.seen[cid] = sorted([*kept, *gone, restored], key=lambda pair: pair[0])
        self.payloads[cid].update(removed)
        return True

    @rule(i=which)
    def restore(self, i: int) -> None:
        cid = self._pick(i)
        mine = [rid for c, rid in self.set_aside if c == cid]
        if mine:
            self._restore(cid, max(mine))

    @rule(i=which, j=st.integers(0, 50), how=st.sampled_from(["ts", "label", "now"]))
    def fork(self, i: int, j: int, how: str) -> None:
        cid = self._pick(i)
        labels = [c.label for c in self.store.checkpoints(cid)]
        if how == "label" and labels:
            label = str(labels[j % len(labels)])
            at = max(c.ts for c in self.store.checkpoints(cid) if c.label == label)
            fork = self.store.fork(cid, at=label)
        elif how == "ts":
            at = self.seen[cid][j % len(self.seen[cid])][0]
            fork = self.store.fork(cid, at=at)
        else:
            at = self._now(cid)
            fork = self.store.fork(cid)
        assert observe(self.store, fork.id, None) == observe(self.store, cid, at)
        self._track(fork.id, [(t, m) for t, m in self.seen[cid] if t <= at])

    @rule(i=which)
    def delete(self, i: int) -> None:
        cid = self._pick(i)
        if cid == self.conversations[0]:
            return
        others = {c: observe(self.store, c, None) for c in self.conversations if c != cid}
        self.store.delete_conversation(cid)
        assert not any(self.store.row_counts(cid).values())
        self.conversations.remove(cid)
        assert {c: observe(self.store, c, None) for c in self.conversations} == others

    @invariant()
    def every_answer_stays_true(self) -> None:
        for cid in self.conversations:
            for stamp, moment in self.seen[cid]:
                assert observe(self.store, cid, stamp) == moment, f"{cid} as of {stamp}"
            for request_id, payload in self.payloads[cid].items():
                assert self.store.request_payload(cid, request_id) == payload
            assert self.store.check(cid, full=True, raise_on_problems=False).ok


def test_the_timeline_keeps_its_promises(fresh_store: StoreFactory) -> None:
    run_state_machine_as_test(
        lambda: Timeline(fresh_store),
        settings=settings(
            max_examples=12,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
