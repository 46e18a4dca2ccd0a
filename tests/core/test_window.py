"""Context-window sizing and compaction triggers (Cline's rules, without model clamps)."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore.core.errors import InvalidInputError
from contextstore.core.window import (
    DEFAULT_CONTEXT_WINDOW,
    ContextWindowInfo,
    compaction_threshold,
    context_window_info,
    keep_for_overflow,
    request_total,
    should_compact,
)


@pytest.mark.parametrize(
    ("window", "expected_window", "expected_max"),
    [
        (None, 128_000, 98_000),
        (0, 128_000, 98_000),
        (8_192, 8_192, 6_553.6),
        (32_000, 32_000, 25_600),
        (64_000, 64_000, 37_000),
        (65_536, 65_536, 52_428.8),
        (128_000, 128_000, 98_000),
        (131_072, 131_072, 104_857.6),
        (163_840, 163_840, 131_072),
        (200_000, 200_000, 160_000),
        (256_000, 256_000, 216_000),
        (400_000, 400_000, 360_000),
        (1_000_000, 1_000_000, 960_000),
        (1_048_576, 1_048_576, 1_008_576),
    ],
)
def test_window_table_matches_cline(
    window: int | None, expected_window: int, expected_max: float
) -> None:
    info = context_window_info(window)
    assert info.context_window == expected_window
    assert info.max_allowed_size == pytest.approx(expected_max)
    assert isinstance(info, ContextWindowInfo)
    assert isinstance(info.max_allowed_size, float)


def test_unknown_window_defaults_to_128k() -> None:
    assert DEFAULT_CONTEXT_WINDOW == 128_000
    assert context_window_info(None).context_window == 128_000


def test_a_configured_window_is_authoritative_no_model_clamp() -> None:
    assert context_window_info(1_000_000).max_allowed_size == 960_000


@pytest.mark.parametrize("bad", [-1, 1.5, "128000", True])
def test_invalid_window_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="context window"):
        context_window_info(bad)  # type: ignore[arg-type]


def test_request_total_sums_all_four_counts_and_treats_none_as_zero() -> None:
    assert request_total(100, 20, 3, 4) == 127
    assert request_total(None, 20, None, None) == 20
    assert request_total(None, None, None, None) == 0


def test_request_total_refuses_negative_counts() -> None:
    with pytest.raises(InvalidInputError, match="tokens_out"):
        request_total(1, -2, 0, 0)


def test_should_compact_is_inclusive_at_max_allowed() -> None:
    assert should_compact(160_000, 200_000) is True
    assert should_compact(159_999, 200_000) is False


def test_should_compact_uses_default_window_when_unknown() -> None:
    assert should_compact(98_000, None) is True
    assert should_compact(97_999, 0) is False


def test_threshold_is_a_floored_fraction_of_the_window() -> None:
    # floor(200_000 * 0.75) = 150_000
    assert should_compact(150_000, 200_000, 0.75) is True
    assert should_compact(149_999, 200_000, 0.75) is False
    # floor(8_192 * 0.5) = 4_096
    assert should_compact(4_096, 8_192, 0.5) is True
    assert should_compact(4_095, 8_192, 0.5) is False


def test_threshold_is_capped_at_max_allowed() -> None:
    assert should_compact(160_000, 200_000, 0.95) is True
    assert should_compact(159_999, 200_000, 1.0) is False


def test_compaction_threshold_is_the_total_should_compact_compares() -> None:
    assert compaction_threshold(200_000, 0.95) == 160_000  # 190,000, capped
    assert compaction_threshold(200_000, 0.75) == 150_000
    assert compaction_threshold(8_192, None) == 6_553.6


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.01, float("nan"), True])
def test_threshold_outside_unit_interval_is_refused(bad: float) -> None:
    with pytest.raises(InvalidInputError, match="threshold"):
        should_compact(1, 200_000, bad)


def test_keep_for_overflow_none_below_max_allowed() -> None:
    assert keep_for_overflow(159_999, 200_000) is None


def test_keep_for_overflow_half_from_max_allowed() -> None:
    assert keep_for_overflow(160_000, 200_000) == "half"
    assert keep_for_overflow(320_000, 200_000) == "half"


def test_keep_for_overflow_quarter_when_half_still_exceeds() -> None:
    assert keep_for_overflow(320_001, 200_000) == "quarter"


def test_keep_for_overflow_refuses_negative_totals() -> None:
    with pytest.raises(InvalidInputError):
        keep_for_overflow(-1, 200_000)


# -- errors name the argument and what was wrong with it ---------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: context_window_info("8k"), "context window must be an int, got str"),
        (lambda: context_window_info(-1), "context window must not be negative, got -1"),
        (lambda: should_compact(1.5, 1_000), "total_tokens must be an int, got float"),
        (lambda: should_compact(True, 1_000), "total_tokens must be an int, got bool"),
        (lambda: keep_for_overflow(None, 1_000), "total_tokens must be an int, got NoneType"),
        (lambda: keep_for_overflow(-5, 1_000), "total_tokens must not be negative, got -5"),
        (lambda: request_total(-1, 0, 0, 0), "tokens_in must not be negative"),
        (lambda: request_total(0, "9", 0, 0), "tokens_out must be an int, got str"),
        (lambda: request_total(0, 0, 1.0, 0), "cache_writes must be an int, got float"),
        (lambda: request_total(0, 0, 0, -2), "cache_reads must not be negative"),
        (
            lambda: should_compact(10, 1_000, threshold=0),
            "threshold must be a fraction of the window in (0, 1], got 0; "
            "pass None to compact at the maximum allowed size",
        ),
    ],
)
def test_a_bad_count_is_refused_naming_it(call: Any, message: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        call()
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: should_compact(-(10**5000), 1_000),
        lambda: context_window_info(-(10**5000)),
        lambda: request_total(0, -(10**5000), 0, 0),
        lambda: keep_for_overflow(-(10**5000), 1_000),
        lambda: should_compact(1, 1_000, threshold=10**5000),
        lambda: should_compact(1, 1_000, threshold=_nested(10_000)),
    ],
)
def test_a_value_without_a_plain_repr_is_refused_by_name(call: Any) -> None:
    """A count of 5,000 digits below zero, or a threshold 10,000 levels deep, has no ``repr``:
    formatting the refusal raised ValueError (Python's limit on digits) or RecursionError."""
    with pytest.raises(InvalidInputError, match=r"(must not be negative|in \(0, 1\]), got [<[]"):
        call()


def _nested(depth: int) -> Any:
    value: Any = 0.5
    for _ in range(depth):
        value = [value]
    return value


def test_a_window_past_what_a_float_holds_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"at most 2\*\*53 tokens"):
        context_window_info(10**400)
    assert context_window_info(2**53).context_window == 2**53
