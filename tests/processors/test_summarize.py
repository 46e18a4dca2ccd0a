from __future__ import annotations

import copy
from typing import Any

import pytest

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.overlays import text_hash
from contextstore.processors import Summarizer, SummaryRequest
from contextstore.processors.summarize import summary_marker

LONG = "word " * 400


def _view() -> list[tuple[int, dict[str, Any]]]:
    return [
        (0, {"role": "user", "content": LONG}),
        (
            1,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "run_tests", "input": {}},
                ],
            },
        ),
        (
            2,
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": LONG},
                    {"type": "text", "text": "short"},
                ],
            },
        ),
        (3, {"role": "assistant", "content": LONG}),
    ]


def test_summaries_replace_long_texts_but_not_the_task() -> None:
    requests: list[SummaryRequest] = []

    def hook(text: str, request: SummaryRequest) -> str:
        requests.append(request)
        return f"{len(text)} chars about words"

    view = _view()
    before = copy.deepcopy(view)
    updates = Summarizer(hook, min_chars=1000).propose(view)
    assert view == before
    assert [u.address for u in updates] == [(2, 0), (3, 0)]
    assert updates[0].text == summary_marker(len(LONG)) + "2000 chars about words"
    assert updates[0].base_hash == text_hash(LONG)
    assert requests[0] == SummaryRequest(
        2, 0, "user", "tool_result", "run_tests", len(LONG) - len(summary_marker(len(LONG)))
    )
    assert requests[1].tool_name is None and requests[1].role == "assistant"


def test_longer_or_empty_summaries_are_not_used() -> None:
    assert Summarizer(lambda t, r: t + t, min_chars=10).propose(_view()) == []
    assert Summarizer(lambda t, r: "  ", min_chars=10).propose(_view()) == []


def test_hook_errors_are_wrapped_and_chained() -> None:
    def hook(text: str, request: SummaryRequest) -> str:
        raise TimeoutError("model timed out")

    with pytest.raises(ContextStoreError, match="model timed out") as info:
        Summarizer(hook, min_chars=10).propose(_view())
    assert isinstance(info.value.__cause__, TimeoutError)


def test_non_string_results_are_refused() -> None:
    bad: Any = lambda t, r: None  # noqa: E731
    with pytest.raises(ContextStoreError, match="not str"):
        Summarizer(bad, min_chars=10).propose(_view())


def test_results_are_cached_by_text_and_request() -> None:
    calls: list[int] = []

    def hook(text: str, request: SummaryRequest) -> str:
        calls.append(request.message_idx)
        return "sum"

    summarizer = Summarizer(hook, min_chars=10)
    first = summarizer.propose(_view())
    assert summarizer.propose(_view()) == first
    assert calls == [2, 3]


def test_config_names_the_hook() -> None:
    def hook(text: str, request: SummaryRequest) -> str:
        return ""

    config = Summarizer(hook, min_chars=5, hook_version="v2").config()
    assert config["min_chars"] == 5 and config["hook_version"] == "v2"
    assert config["hook"].endswith("hook")
    assert config == Summarizer(hook, min_chars=5, hook_version="v2").config()


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"min_chars": "100"}, "min_chars"),
        ({"min_chars": None}, "min_chars"),
        ({"min_chars": 1.5}, "min_chars"),
        ({"cache_size": "10"}, "cache_size"),
        ({"cache_size": -1}, "cache_size"),
    ],
)
def test_settings_of_the_wrong_type_are_refused(options: dict[str, Any], name: str) -> None:
    # A string or None failed with TypeError (comparing it with 0).
    with pytest.raises(InvalidInputError, match=name):
        Summarizer(lambda text, request: "", **options)


def test_a_hook_that_cannot_be_called_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="hook"):
        Summarizer("summarise it")  # type: ignore[arg-type]


def _two_lambdas() -> list[Any]:
    """Two hooks of one qualified name, as a factory or two lambdas in one function make."""
    return [lambda text, request: "ONE", lambda text, request: "TWO"]


def test_renders_with_hooks_of_one_name_do_not_answer_for_each_other() -> None:
    from contextstore import ContextStore
    from contextstore.processors import Pipeline

    one, two = _two_lambdas()
    store = ContextStore.open(":memory:")
    conv = store.create_conversation()
    store.append(conv.id, [{"role": "user", "content": "task"}])
    store.append(conv.id, "assistant", "x" * 500)
    first = Summarizer(one, min_chars=10)
    assert first.config() == Summarizer(two, min_chars=10).config()
    assert store.render(conv.id, pipeline=Pipeline([first]))[1]["content"].endswith("ONE")
    other = Pipeline([Summarizer(two, min_chars=10)])
    assert store.render(conv.id, pipeline=other)[1]["content"].endswith("TWO")
    # the same hook in a new pipeline is still served from the render cache
    assert Pipeline([first]).render_key() == Pipeline([Summarizer(one, min_chars=10)]).render_key()
    assert Pipeline([first]).render_key() != other.render_key()
    store.close()
