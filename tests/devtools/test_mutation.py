"""The mutation sample: the same seed draws the same mutants, every package gets its share,
and a run's results are scored from mutmut's own files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextstore.devtools import mutation
from contextstore.devtools.mutation import MutationToolError


def _names(package: str, module: str, count: int) -> list[str]:
    return [f"contextstore.{package}.{module}.x_f__mutmut_{i}" for i in range(1, count + 1)]


def _write_meta(root: Path, module: str, codes: dict[str, int | None]) -> None:
    path = (
        root / "contextstore" / Path(*module.split(".")[:-1]) / f"{module.split('.')[-1]}.py.meta"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes}), encoding="utf-8")


def test_a_sample_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    names = _names("core", "view", 50) + _names("storage", "codec", 50)
    first = mutation.sample(reversed(names), 10, seed=7)
    assert first == mutation.sample(names, 10, seed=7)
    assert first != mutation.sample(names, 10, seed=8)


def test_a_larger_sample_holds_every_mutant_of_a_smaller_one() -> None:
    names = _names("core", "view", 80) + _names("facade", "base", 80)
    assert set(mutation.sample(names, 10, seed=3)) < set(mutation.sample(names, 25, seed=3))


def test_each_package_gets_its_share_and_a_small_one_gives_all() -> None:
    names = (
        _names("core", "view", 50) + _names("storage", "codec", 3) + _names("facade", "base", 11)
    )
    chosen = mutation.sample(names, 10, seed=1)
    by_package = [mutation.package_of(name) for name in chosen]
    assert by_package.count("core") == 10
    assert by_package.count("storage") == 3
    assert by_package.count("facade") == 10
    assert len(set(chosen)) == len(chosen)


def test_a_sample_can_be_limited_to_packages() -> None:
    names = _names("core", "view", 5) + _names("storage", "codec", 5)
    assert {mutation.package_of(n) for n in mutation.sample(names, 5, 1, ("storage",))} == {
        "storage"
    }


def test_a_sample_of_nothing_is_refused() -> None:
    with pytest.raises(MutationToolError, match="at least 1"):
        mutation.sample(_names("core", "view", 5), 0, seed=1)


def test_names_that_are_not_mutants_are_refused() -> None:
    with pytest.raises(MutationToolError, match="not a mutmut mutant name"):
        mutation.package_of("contextstore.core.view.finish_view")
    assert mutation.module_of("contextstore.storage.codec.x_f__mutmut_2") == "storage.codec"


def test_results_are_read_from_every_module_s_meta_file(tmp_path: Path) -> None:
    _write_meta(tmp_path, "core.view", {"contextstore.core.view.x_f__mutmut_1": 1})
    _write_meta(tmp_path, "storage.codec", {"contextstore.storage.codec.x_f__mutmut_1": None})
    assert mutation.read_results(tmp_path) == {
        "contextstore.core.view.x_f__mutmut_1": 1,
        "contextstore.storage.codec.x_f__mutmut_1": None,
    }


def test_no_mutants_folder_says_to_generate_them(tmp_path: Path) -> None:
    with pytest.raises(MutationToolError, match="run `mutmut run` once"):
        mutation.read_results(tmp_path)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (1, "killed"),
        (3, "killed"),
        (0, "survived"),
        (33, "no tests"),
        (5, "no tests"),
        (36, "timeout"),
        (-24, "timeout"),
        (None, "not run"),
        (-11, "other"),
        (35, "other"),
    ],
)
def test_exit_codes_read_as_mutmut_reads_them(code: int | None, expected: str) -> None:
    assert mutation.status(code) == expected


def test_mutmut_reads_those_codes_the_same_way() -> None:
    stats = pytest.importorskip("mutmut.stats")
    for codes, expected in [
        (mutation.KILLED_CODES, "killed"),
        (mutation.SURVIVED_CODES, "survived"),
        (mutation.TIMEOUT_CODES, "timeout"),
        (mutation.NO_TEST_CODES, "no tests"),
    ]:
        assert {stats.status_by_exit_code[code] for code in codes} == {expected}


def test_a_score_counts_each_verdict_per_package() -> None:
    results: dict[str, int | None] = {
        "contextstore.core.view.x_f__mutmut_1": 1,
        "contextstore.core.view.x_f__mutmut_2": 0,
        "contextstore.core.view.x_f__mutmut_3": 36,
        "contextstore.core.view.x_f__mutmut_4": None,
        "contextstore.facade.base.x_f__mutmut_1": 33,
        "contextstore.facade.base.x_f__mutmut_2": -11,
    }
    rows = mutation.score(results, sorted(results))
    assert [row.package for row in rows] == ["core", "facade"]
    core, facade = rows
    assert (core.sampled, core.checked, core.killed, core.timed_out, core.survived) == (
        4,
        3,
        1,
        1,
        1,
    )
    assert core.survived_share == pytest.approx(1 / 3)
    assert (facade.no_tests, facade.other, facade.survived_share) == (1, 1, 0.5)
    assert mutation.survivors(results, sorted(results)) == [
        "contextstore.core.view.x_f__mutmut_2",
        "contextstore.facade.base.x_f__mutmut_1",
    ]


def test_a_sample_drawn_before_the_code_changed_is_refused() -> None:
    with pytest.raises(MutationToolError, match="draw it again"):
        mutation.score({}, ["contextstore.core.view.x_f__mutmut_1"])


def test_the_command_prints_a_sample_and_its_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_meta(
        tmp_path,
        "core.view",
        {f"contextstore.core.view.x_f__mutmut_{i}": i % 2 for i in range(1, 7)},
    )
    assert mutation.main(["--mutants", str(tmp_path), "sample", "--per-package", "4"]) == 0
    drawn = capsys.readouterr().out.split()
    assert len(drawn) == 4
    names = tmp_path / "sample.txt"
    names.write_text("\n".join(drawn), encoding="utf-8")
    assert mutation.main(["--mutants", str(tmp_path), "score", str(names)]) == 0
    out = capsys.readouterr().out
    killed = sum(1 for name in drawn if int(name.rsplit("_", 1)[1]) % 2 == 1)
    assert f"| core | 4 | 4 | {killed} (" in out
    assert mutation.main(["--mutants", str(tmp_path / "none"), "score", str(names)]) == 2
    assert "run `mutmut run` once" in capsys.readouterr().err
