from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.overlays import (
    BlockUpdate,
    Message,
    UpdateKind,
    UpdateMode,
    apply_overlays,
    text_hash,
)
from contextstore.processors import (
    Distiller,
    IndexedView,
    MediaDegrader,
    OutputTrimmer,
    Pipeline,
    SecretMasker,
    Summarizer,
    SummaryRequest,
    default_pipeline,
    drop_stale,
    is_stale,
)

from ._corpus import high_samples

TOKEN = high_samples()[11].secret
IMAGE = {
    "type": "image",
    "source": {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(b"png").decode(),
    },
}


def big_output(lines: int = 400) -> str:
    return f"token {TOKEN}\n" + "".join(f"row {i}\n" for i in range(lines)) + "FAILED 3 tests\n"


def short_summary(text: str, request: SummaryRequest) -> str:
    return f"summary of block {request.message_idx}.{request.block_idx}"


def store_view(view: IndexedView, updates: Sequence[BlockUpdate]) -> list[tuple[int, Message]]:
    """What the store shows: the newest update per block, applied to the original."""
    newest = {u.address: u for u in updates}
    return [(idx, apply_overlays(message, idx, newest)) for idx, message in view]


def sample_view() -> list[tuple[int, Message]]:
    return [
        (0, {"role": "user", "content": "fix the tests"}),
        (
            1,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "running"},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "bash",
                        "input": {"cmd": f"T={TOKEN} make"},
                    },
                ],
            },
        ),
        (
            4,
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": big_output()},
                    {"type": "text", "text": "noise   \n\n\n\n\nend"},
                    IMAGE,
                ],
            },
        ),
        (
            5,
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [
                            {"type": "text", "text": "shot " + "x" * 50},
                            IMAGE,
                        ],
                    },
                ],
            },
        ),
    ]


def full_pipeline() -> Pipeline:
    return Pipeline(
        [
            SecretMasker(),
            Distiller(),
            OutputTrimmer(max_chars=500),
            MediaDegrader(),
            Summarizer(short_summary, min_chars=300),
        ]
    )


def test_processors_run_in_order_and_see_earlier_results() -> None:
    view = sample_view()
    report = Pipeline([SecretMasker(), OutputTrimmer(max_chars=500)]).run_report(view)
    mask, trim = report.steps
    assert [u.address for u in mask.accepted] == [(1, 1), (4, 0)]
    assert [u.address for u in trim.accepted] == [(4, 0)]
    trimmed = trim.accepted[0]
    assert trimmed.base_hash == text_hash(mask.accepted[1].text)
    assert TOKEN not in trimmed.text and "[REDACTED:github_token]" in trimmed.text
    assert trimmed.text.endswith("FAILED 3 tests\n")
    assert report.updates == mask.accepted + trim.accepted
    assert all(u.kind == UpdateKind.PROCESSOR for u in report.updates)


def test_store_application_of_updates_matches_the_processed_view() -> None:
    view = sample_view()
    report = full_pipeline().run_report(view)
    assert store_view(view, report.updates) == list(report.view)
    assert TOKEN not in json.dumps(list(report.view))


def test_text_after_block_update_is_promoted() -> None:
    view = sample_view()
    updates = Pipeline([MediaDegrader(), OutputTrimmer(max_chars=100)]).run(view)
    trim = [u for u in updates if u.source == "trim" and u.address == (5, 0)]
    assert trim and trim[0].mode == UpdateMode.BLOCK
    assert store_view(view, updates)[3][1]["content"][0]["content"] == trim[0].text


def test_overlays_argument_promotes_against_existing_block_updates() -> None:
    view = sample_view()
    degraded = MediaDegrader().propose(view)
    overlays = {u.address: u for u in degraded}
    current = store_view(view, degraded)
    updates = Pipeline([OutputTrimmer(max_chars=100)]).run(current, overlays=overlays)
    assert {u.address: u.mode for u in updates}[(5, 0)] == UpdateMode.BLOCK
    plain = Pipeline([OutputTrimmer(max_chars=100)]).run(current)
    assert {u.address: u.mode for u in plain}[(5, 0)] == UpdateMode.TEXT


def test_inputs_are_never_mutated() -> None:
    view = sample_view()
    before = copy.deepcopy(view)
    full_pipeline().run(view)
    full_pipeline().run(view, parallel=True)
    assert view == before


def test_parallel_equals_sequential() -> None:
    view = sample_view()
    pipeline = full_pipeline()
    assert pipeline.run(view, parallel=True) == pipeline.run(view)
    assert pipeline.run_report(view, parallel=True) == pipeline.run_report(view)


BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "plain words"},
    {"type": "text", "text": big_output(80)},
    {"type": "text", "text": "dup line\n" * 30},
    {"type": "text", "text": f"key {TOKEN}"},
    {"type": "tool_result", "tool_use_id": "t", "content": big_output(50)},
    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "a"}, IMAGE]},
    {"type": "tool_use", "id": "t", "name": "x", "input": {"k": TOKEN}},
    IMAGE,
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(BLOCKS), min_size=1, max_size=4), min_size=1, max_size=5),
    st.permutations(range(5)),
)
def test_parallel_equals_sequential_on_random_views(
    contents: list[list[dict[str, Any]]], order: list[int]
) -> None:
    view = [
        (i * 2, {"role": ("user", "assistant")[i % 2], "content": c})
        for i, c in enumerate(contents)
    ]
    processors = full_pipeline().processors
    pipeline = Pipeline([processors[i] for i in order])
    sequential = pipeline.run_report(view)
    assert pipeline.run_report(view, parallel=True) == sequential
    assert store_view(view, sequential.updates) == list(sequential.view)
    assert drop_stale(sequential.updates, view) == list(sequential.updates)


def test_parallel_uses_threads_for_independent_processors() -> None:
    seen: set[int] = set()
    barrier = threading.Barrier(2, timeout=5)

    class Probe:
        independent = True

        def __init__(self, name: str) -> None:
            self.name = name

        def config(self) -> dict[str, Any]:
            return {}

        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            seen.add(threading.get_ident())
            barrier.wait()
            return []

    Pipeline([Probe("a"), Probe("b")]).run(sample_view(), parallel=True)
    assert len(seen) == 2


def test_errors_propagate_from_parallel_runs() -> None:
    def boom(text: str, request: SummaryRequest) -> str:
        raise RuntimeError("down")

    pipeline = Pipeline([SecretMasker(), Summarizer(boom, min_chars=10)])
    with pytest.raises(ContextStoreError, match="down"):
        pipeline.run(sample_view(), parallel=True)


def test_staleness() -> None:
    view = sample_view()
    update = SecretMasker().propose(view)[1]
    assert update.address == (4, 0)
    assert not is_stale(update, view)
    changed = copy.deepcopy(view)
    changed[2][1]["content"][0]["content"] += "more"
    assert is_stale(update, changed)
    removed_block = copy.deepcopy(view)
    removed_block[2][1]["content"] = []
    assert is_stale(update, removed_block)
    assert is_stale(update, view[:2])
    wrong_mode = BlockUpdate(4, 2, UpdateKind.PROCESSOR, "x", base_hash="0")
    assert is_stale(wrong_mode, view)
    unchecked = BlockUpdate(4, 1, UpdateKind.PROCESSOR, "x")
    assert not is_stale(unchecked, view)
    assert drop_stale([update, unchecked], changed) == [unchecked]


def test_drop_stale_follows_chains() -> None:
    view = sample_view()
    updates = Pipeline([SecretMasker(), OutputTrimmer(max_chars=500)]).run(view)
    chained = updates[-1]
    assert is_stale(chained, view)
    assert drop_stale(updates, view) == updates
    assert drop_stale([updates[0], updates[2]], view) == updates[:1]


class Faulty:
    name = "faulty"

    def __init__(self, mode: str = UpdateMode.TEXT) -> None:
        self.mode = mode

    def config(self) -> dict[str, Any]:
        return {"mode": self.mode}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        base = text_hash("running")
        first = BlockUpdate(1, 0, UpdateKind.PROCESSOR, "a", "faulty", {}, base, self.mode)
        stale = BlockUpdate(1, 0, UpdateKind.PROCESSOR, "b", "faulty", {}, "nope", self.mode)
        return [first, first, stale]


def test_bad_proposals_are_dropped_or_refused() -> None:
    step = Pipeline([Faulty()]).run_report(sample_view()).steps[0]
    assert [u.text for u in step.accepted] == ["a"]
    assert [u.text for u in step.dropped] == ["a", "b"]
    with pytest.raises(InvalidInputError):
        Pipeline([Faulty("sideways")]).run(sample_view())


class Returning:
    """A processor that proposes whatever it was built with."""

    def __init__(self, result: Any, config: dict[str, Any] | None = None) -> None:
        self.name = "returning"
        self.result = result
        self.settings = config or {}

    def config(self) -> dict[str, Any]:
        return self.settings

    def propose(self, view: IndexedView) -> Any:
        return self.result


@pytest.mark.parametrize(
    "processors",
    ["abc", b"x", {"a": 1}, 5, None, [1], [None], ["trim"], [object()], [Returning([]), 3]],
)
def test_a_pipeline_of_things_that_are_not_processors_is_refused(processors: Any) -> None:
    # They were taken, and every render and prepare ended in AttributeError.
    with pytest.raises(InvalidInputError, match="processor"):
        Pipeline(processors)


@pytest.mark.parametrize("parallel", ["yes", "no", 1, None])
def test_a_parallel_flag_that_is_not_a_bool_is_refused(parallel: Any) -> None:
    # "no" was taken, as true.
    with pytest.raises(InvalidInputError, match=r"^parallel must be True or False, got "):
        Pipeline([], parallel=parallel)


def test_a_processor_without_a_name_string_is_refused() -> None:
    nameless = Returning([])
    nameless.name = 5  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match="not a processor"):
        Pipeline([nameless])


def test_a_config_that_is_not_json_is_refused_when_the_pipeline_is_made() -> None:
    with pytest.raises(InvalidInputError, match="JSON-serialisable"):
        Pipeline([Returning([], {"when": object()})])


@pytest.mark.parametrize("result", [None, 5, "text", [1], [None], ({"message_idx": 1},)])
def test_proposals_that_are_not_block_updates_are_refused(result: Any) -> None:
    # They failed with TypeError or AttributeError inside the run.
    with pytest.raises(InvalidInputError, match="returning"):
        Pipeline([Returning(result)]).run(sample_view())


def test_config_is_stable_and_ordered() -> None:
    assert full_pipeline().config() == full_pipeline().config()
    assert full_pipeline().config_key() == full_pipeline().config_key()
    names = [p["name"] for p in full_pipeline().config()["processors"]]
    assert names == ["secret_mask", "distill", "trim", "degrade_media", "summarize"]
    other = Pipeline([SecretMasker(), Distiller(), OutputTrimmer(max_chars=501)])
    assert other.config_key() != full_pipeline().config_key()
    json.dumps(full_pipeline().config())

    class Unserialisable(Faulty):
        def config(self) -> dict[str, Any]:
            return {"when": object()}

    with pytest.raises(InvalidInputError):
        Pipeline([Unserialisable()]).config()


def test_default_pipeline_masks_high_confidence_only() -> None:
    pipeline = default_pipeline()
    assert [type(p) for p in pipeline.processors] == [SecretMasker]
    assert pipeline.config()["processors"][0]["config"]["confidence"] == "high"
    view = [(2, {"role": "user", "content": "MY_SERVICE_SECRET=" + "aZ3" * 10})]
    assert pipeline.run(view) == []
    assert [u.address for u in pipeline.run(sample_view())] == [(1, 1), (4, 0)]
