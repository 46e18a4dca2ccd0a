"""A seeded, stratified sample of mutmut's mutants, and the score of a run over it.

A whole mutation run of ``storage/`` or ``facade/`` is thousands of mutants, and most of them
run a large part of the store tests: days on two cores. A random sample of the same mutants,
drawn per package with a fixed seed, estimates each package's score in hours, and the same
command draws the same sample again, so a second run (after new tests) is comparable.

``sample`` prints mutant names for ``mutmut run``; ``score`` reads mutmut's results for those
names from ``mutants/`` and prints one row per package, then the survivors::

    python -m contextstore.devtools.mutation sample --per-package 120 --seed 2026 > sample.txt
    CONTEXTSTORE_MUTATION_SCOPE=all mutmut run --max-children 2 $(cat sample.txt)
    python -m contextstore.devtools.mutation score sample.txt
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("core", "storage", "facade")
"""The packages the mutation run mutates (``only_mutate`` in ``pyproject.toml``)."""

MUTANT_MARK = "__mutmut_"

# mutmut's exit codes (``mutmut.stats.status_by_exit_code``): 1 and 3 are kills, 0 a
# survivor, None not run yet; 36, 24, -24, 152 and 255 timeouts; 5 and 33 mean no test ran it.
KILLED_CODES = frozenset({1, 3})
SURVIVED_CODES = frozenset({0})
TIMEOUT_CODES = frozenset({36, 24, -24, 152, 255})
NO_TEST_CODES = frozenset({5, 33})


class MutationToolError(Exception):
    """A sample or a score could not be made: the message says why and what to run."""


def package_of(name: str) -> str:
    """``core``, ``storage`` or ``facade`` for a mutant name such as
    ``contextstore.storage.codec.x_decode__mutmut_3``."""
    parts = name.split(".")
    if len(parts) < 3 or parts[0] != "contextstore" or MUTANT_MARK not in name:
        raise MutationToolError(f"{name!r} is not a mutmut mutant name of contextstore")
    return parts[1]


def module_of(name: str) -> str:
    """The mutated module, without the ``contextstore.`` prefix (``storage.codec``)."""
    package_of(name)
    return ".".join(name.split(".")[1:3])


def read_results(mutants_dir: Path) -> dict[str, int | None]:
    """Every mutant mutmut generated under ``mutants_dir``, with its exit code (None: not run).

    mutmut keeps them in one ``<module>.py.meta`` JSON file per mutated module."""
    root = mutants_dir / "contextstore"
    if not root.is_dir():
        raise MutationToolError(
            f"{mutants_dir} holds no generated mutants; run `mutmut run` once to generate them"
        )
    results: dict[str, int | None] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise MutationToolError(f"{meta} cannot be read as mutmut's results: {error}") from None
        for name, code in data.get("exit_code_by_key", {}).items():
            results[name] = code
    return results


def sample(
    names: Iterable[str], per_package: int, seed: int, packages: Sequence[str] = PACKAGES
) -> list[str]:
    """Up to ``per_package`` names drawn at random from each package, the same ones for the
    same names, size and seed; a package with fewer mutants gives all of them.

    Each package's mutants are shuffled once per seed and the sample is the front of that
    order, so a larger sample holds every mutant of a smaller one (their results are reused)."""
    if per_package < 1:
        raise MutationToolError(f"--per-package must be at least 1, not {per_package}")
    by_package: dict[str, list[str]] = {package: [] for package in packages}
    for name in names:
        package = package_of(name)
        if package in by_package:
            by_package[package].append(name)
    chosen: list[str] = []
    for package in packages:
        pool = sorted(by_package[package])
        random.Random(f"{seed}:{package}").shuffle(pool)
        chosen.extend(sorted(pool[:per_package]))
    return chosen


@dataclass(frozen=True)
class PackageScore:
    """How the sampled mutants of one package fared."""

    package: str
    sampled: int
    killed: int
    timed_out: int
    survived: int
    no_tests: int
    not_run: int
    other: int

    @property
    def checked(self) -> int:
        """Mutants that have a verdict (everything but those not run yet)."""
        return self.sampled - self.not_run

    @property
    def survived_share(self) -> float:
        """Survivors (no test ran them, or tests ran and passed) per checked mutant."""
        return (self.survived + self.no_tests) / self.checked if self.checked else 0.0


def status(code: int | None) -> str:
    """One of ``killed``, ``timeout``, ``survived``, ``no tests``, ``not run``, ``other``."""
    if code is None:
        return "not run"
    if code in KILLED_CODES:
        return "killed"
    if code in TIMEOUT_CODES:
        return "timeout"
    if code in SURVIVED_CODES:
        return "survived"
    if code in NO_TEST_CODES:
        return "no tests"
    return "other"


def score(results: Mapping[str, int | None], names: Sequence[str]) -> list[PackageScore]:
    """One row per package that ``names`` draws from, in ``PACKAGES`` order."""
    missing = [name for name in names if name not in results]
    if missing:
        raise MutationToolError(
            f"{len(missing)} sampled names are not among the generated mutants (first: "
            f"{missing[0]}); the code changed since the sample was drawn: draw it again"
        )
    counts: dict[str, Counter[str]] = {}
    for name in names:
        counts.setdefault(package_of(name), Counter())[status(results[name])] += 1
    rows = []
    for package in sorted(counts, key=lambda p: (*PACKAGES, p).index(p)):
        tally = counts[package]
        rows.append(
            PackageScore(
                package=package,
                sampled=sum(tally.values()),
                killed=tally["killed"],
                timed_out=tally["timeout"],
                survived=tally["survived"],
                no_tests=tally["no tests"],
                not_run=tally["not run"],
                other=tally["other"],
            )
        )
    return rows


def survivors(results: Mapping[str, int | None], names: Sequence[str]) -> list[str]:
    """The sampled mutants that survived or that no test ran, in name order."""
    return sorted(n for n in names if status(results.get(n)) in {"survived", "no tests"})


def _read_names(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").split()
    except OSError as error:
        raise MutationToolError(f"cannot read the sample {path}: {error.strerror}") from None
    return [line for line in lines if line]


def main(argv: Sequence[str] | None = None) -> int:
    """``sample`` or ``score``; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m contextstore.devtools.mutation")
    parser.add_argument(
        "--mutants",
        type=Path,
        default=Path("mutants"),
        help="mutmut's working copy (default: ./mutants)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    draw = commands.add_parser("sample", help="print a seeded sample of mutant names")
    draw.add_argument("--per-package", type=int, required=True)
    draw.add_argument("--seed", type=int, default=2026)
    draw.add_argument(
        "--package",
        action="append",
        choices=PACKAGES,
        help="only this package (repeatable; default: all three)",
    )
    tally = commands.add_parser("score", help="score the mutants named in a file")
    tally.add_argument("names", type=Path, help="a file of mutant names, as `sample` prints")
    args = parser.parse_args(argv)
    try:
        results = read_results(args.mutants)
        if args.command == "sample":
            packages = tuple(args.package) if args.package else PACKAGES
            print("\n".join(sample(results, args.per_package, args.seed, packages)))
            return 0
        names = _read_names(args.names)
        print(
            "| package | sampled | checked | killed (or timed out) | survived (or no test) "
            "| other (segfault, suspicious) |"
        )
        print("|---|---|---|---|---|---|")
        for row in score(results, names):
            killed = row.killed + row.timed_out
            share = 100 * killed / row.checked if row.checked else 0.0
            print(
                f"| {row.package} | {row.sampled} | {row.checked} | {killed} ({share:.1f} %) "
                f"| {row.survived + row.no_tests} ({100 * row.survived_share:.1f} %) "
                f"| {row.other} |"
            )
        print()
        for name in survivors(results, names):
            print(name)
        return 0
    except MutationToolError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
