"""Random sessions made here, exported to another agent's files and imported again.

An agent writes a session through the store (user turns, tool calls and their results,
prepared and recorded requests, checkpoints, truncations); it is exported as a Cline task
or a Gemini CLI session and imported into an empty store. The oracle is the first store:
what the second holds must be what the first held, at every moment the files keep.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextstore import ContextStore
from contextstore.core.records import RequestRecord
from contextstore.interop import export_cline, export_gemini, import_cline, import_gemini
from tests.interop.real import CLINE, GEMINI, need

WALKS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Step:
    """One thing the agent does; ``size`` varies the text or the tokens it records."""

    kind: str
    size: int


KINDS = [
    "user",
    "assistant",
    "thinking",
    "image",
    "tool",
    "tools",
    "failed tool",
    "checkpoint",
    "request",
    "big request",
    "range",
]
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJ"
    "RU5ErkJggg=="
)
STEP = st.builds(Step, st.sampled_from(KINDS), st.integers(0, 3))


class Agent:
    """Writes one session into ``store`` the way an agent loop would."""

    def __init__(self, store: ContextStore, cid: str | None = None) -> None:
        self.store = store
        self.calls = 0
        if cid is None:
            cid = store.create_conversation(model_id="claude-sonnet-4-5").id
            store.append(cid, "user", "<task>\nTidy the parser\n</task>")
        else:  # an imported task the agent goes on with
            store.append(cid, "user", [_text("Go on, please.")])
        self.cid = cid

    def do(self, step: Step) -> None:
        store, cid = self.store, self.cid
        if step.kind == "user":
            store.append(cid, "user", [{"type": "text", "text": "more " * (step.size + 1)}])
        elif step.kind == "assistant":
            store.append(cid, "assistant", "Done." if step.size % 2 else [_text("Working.")])
        elif step.kind == "thinking":
            thought = {"type": "thinking", "thinking": "Plan.", "signature": f"sig{step.size}"}
            store.append(cid, "assistant", [thought, _text("Planned.")])
        elif step.kind == "image":
            source = {"type": "base64", "media_type": "image/png", "data": PNG}
            store.append(cid, "user", [{"type": "image", "source": source}, _text("This one.")])
        elif step.kind in ("tool", "tools", "failed tool"):
            ids = [f"toolu_{self.calls + n}" for n in range(2 if step.kind == "tools" else 1)]
            self.calls += len(ids)
            uses = [
                {"type": "tool_use", "id": i, "name": "read_file", "input": {"path": f"{i}.py"}}
                for i in ids
            ]
            store.append(cid, "assistant", [_text("Reading."), *uses])
            results: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": i, "content": "line\n" * (step.size + 1)}
                for i in ids
            ]
            if step.kind == "failed tool":
                results = [
                    {**r, "is_error": True, "content": [_text("No such file.")]} for r in results
                ]
            store.append(cid, "user", results)
        elif step.kind == "checkpoint":
            store.checkpoint(cid, git_hash=f"{step.size}" * 40)
        elif step.kind in ("request", "big request"):
            # A turn of the loop: prepare, send, store the answer, record what it used.
            prepared = store.prepare_request(cid, system="Be brief.")
            assert prepared.request_id is not None
            store.append(cid, "assistant", [_text(f"Answer {prepared.request_id}.")])
            tokens_in = 150_000 if step.kind == "big request" else 1_000 * (step.size + 1)
            store.record_request(
                cid,
                request_id=prepared.request_id,
                tokens_in=tokens_in,
                tokens_out=10,
                cache_writes=100 * step.size,
                cache_reads=50 * (step.size % 2),
                cost=0.001 * (step.size + 1),
            )
        elif step.kind == "range":
            count = store.message_count(cid)
            current = store.deleted_range(cid)
            low = max(2, current[1] + 1 if current else 2)
            if count - 2 >= low:
                store.set_deleted_range(cid, min(low + step.size, count - 2))


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _usage(request: RequestRecord) -> tuple[Any, ...]:
    return (
        request.tokens_in,
        request.tokens_out,
        request.cache_writes,
        request.cache_reads,
        request.cost,
        request.model_id,
    )


def _held(store: ContextStore, cid: str) -> dict[str, Any]:
    """What the files must bring back: the messages, the view, the range, the checkpoints,
    the usage, and how many messages the store held at each checkpoint and request."""
    checkpoints = store.checkpoints(cid)
    requests = store.requests(cid)
    return {
        "messages": store.messages(cid),
        "range": store.deleted_range(cid),
        "view": store.render(cid),
        "hashes": [c.git_hash for c in checkpoints],
        "usage": [_usage(r) for r in requests],
        "at checkpoints": _view_lengths(store, cid, [c.ts for c in checkpoints]),
        "at requests": _view_lengths(store, cid, [r.ts for r in requests]),
    }


def _moments(store: ContextStore, cid: str) -> list[int]:
    return sorted([c.ts for c in store.checkpoints(cid)] + [r.ts for r in store.requests(cid)])


def _view_lengths(store: ContextStore, cid: str, moments: list[int]) -> list[int]:
    return [len(store.messages(cid, as_of=ts)) for ts in moments]


STEPS = st.lists(STEP, min_size=1, max_size=14)
# A session recording holds every message (Gemini CLI manages its own context when it
# resumes one), so the walks exported to Gemini make no truncation.
UNTRUNCATED = [kind for kind in KINDS if kind not in ("big request", "range")]
UNTRUNCATED_STEPS = st.lists(
    st.builds(Step, st.sampled_from(UNTRUNCATED), st.integers(0, 3)), min_size=1, max_size=14
)


@WALKS
@given(steps=STEPS)
@example(
    steps=[
        Step("tool", 1),
        Step("request", 0),
        Step("checkpoint", 1),
        Step("big request", 0),
        Step("tool", 0),
        Step("request", 0),
        Step("checkpoint", 2),
        Step("user", 0),
    ]
)
def test_a_session_made_here_comes_back_from_its_cline_task(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Step]
) -> None:
    out = tmp_path_factory.mktemp("walk") / "tasks" / "1760000000000"
    with ContextStore.open(":memory:") as store:
        agent = Agent(store)
        for step in steps:
            agent.do(step)
        cid = agent.cid
        export_cline(store, cid, out)
        api = json.loads((out / "api_conversation_history.json").read_text(encoding="utf-8"))
        ui = json.loads((out / "ui_messages.json").read_text(encoding="utf-8"))
        here = _held(store, cid)
        # Cline's restore to a checkpoint or request keeps api[0 : index + 2]: exactly what
        # the store held at that moment.
        stamped = [m for m in ui if m.get("say") in ("checkpoint_created", "api_req_started")]
        moments = _moments(store, cid)
        assert len(stamped) == len(moments)
        for ts, message in zip(moments, stamped, strict=True):
            kept = api[: (message.get("conversationHistoryIndex") or 0) + 2]
            assert kept == store.messages(cid, as_of=ts)
    with ContextStore.open(":memory:") as other:
        again_id = import_cline(other, out).conversation_id
        assert _held(other, again_id) == here
        assert import_cline(other, out).items[0].status == "unchanged"


@WALKS
@given(steps=UNTRUNCATED_STEPS)
def test_a_session_made_here_comes_back_from_its_gemini_recording(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Step]
) -> None:
    path = tmp_path_factory.mktemp("walk") / "session.jsonl"
    with ContextStore.open(":memory:") as store:
        agent = Agent(store)
        for step in steps:
            agent.do(step)
        export_gemini(store, agent.cid, path)
        here = store.render(agent.cid, format="gemini")
        count = store.message_count(agent.cid)
        usage = [(r.total_tokens, r.tokens_out) for r in store.requests(agent.cid)]
    with ContextStore.open(":memory:") as other:
        again_id = import_gemini(other, path).conversation_id
        assert other.message_count(again_id) == count
        assert other.render(again_id, format="gemini") == here
        assert [(r.total_tokens, r.tokens_out) for r in other.requests(again_id)] == usage
        assert import_gemini(other, path).items[0].status == "unchanged"


REAL_TASK = CLINE / "gmfstu-task-1769053680585"


@settings(WALKS, max_examples=10)
@given(steps=st.lists(STEP, min_size=1, max_size=8))
def test_a_real_task_continued_here_comes_back_from_its_export(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Step]
) -> None:
    """Cline's own task, imported, continued by an agent here and exported over its folder:
    an empty store reads the same conversation from the folder, and so does the store it
    came from, taking the rows written here again from the export (it called the folder a
    conflict: changed, and so was the conversation)."""
    folder = tmp_path_factory.mktemp("walk") / "tasks" / REAL_TASK.name
    shutil.copytree(need(REAL_TASK), folder)
    with ContextStore.open(":memory:") as store:
        cid = import_cline(store, folder).conversation_id
        agent = Agent(store, cid)
        for step in steps:
            agent.do(step)
        export_cline(store, cid, folder, overwrite=True)
        here = _held(store, cid)
        taken = import_cline(store, folder).items[0]
        assert taken.status == "updated" and taken.replaced > 0
        assert _held(store, cid) == here
        assert import_cline(store, folder).items[0].status == "unchanged"
    with ContextStore.open(":memory:") as other:
        again_id = import_cline(other, folder).conversation_id
        assert _held(other, again_id) == here


REAL_SESSION = GEMINI / "m-gemini" / "session-2025-12-30T01-16-3f9ce747.json"


@settings(WALKS, max_examples=10)
@given(steps=st.lists(st.builds(Step, st.sampled_from(UNTRUNCATED), st.integers(0, 3)), max_size=8))
def test_a_real_session_continued_here_comes_back_from_its_export(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Step]
) -> None:
    """Gemini CLI's own session, imported, continued here and exported over its file: the
    store it came from takes the file back (the rows written here again from it), and an
    empty store reads the same conversation."""
    path = tmp_path_factory.mktemp("walk") / REAL_SESSION.name
    shutil.copy(need(REAL_SESSION), path)
    with ContextStore.open(":memory:") as store:
        cid = import_gemini(store, path).conversation_id
        agent = Agent(store, cid)
        for step in steps:
            agent.do(step)
        export_gemini(store, cid, path, overwrite=True)
        here = _gemini_held(store, cid)
        assert import_gemini(store, path).items[0].status == "updated"
        assert _gemini_held(store, cid) == here
        assert import_gemini(store, path).items[0].status == "unchanged"
    with ContextStore.open(":memory:") as other:
        assert _gemini_held(other, import_gemini(other, path).conversation_id) == here


def _gemini_held(store: ContextStore, cid: str) -> dict[str, Any]:
    return {
        "view": store.render(cid, format="gemini"),
        "messages": store.message_count(cid),
        "usage": [(r.total_tokens, r.tokens_out) for r in store.requests(cid)],
    }
