"""When a processor runs and on which nodes: triggers, dependencies and their order.

A processor may declare ``trigger`` (a :class:`Trigger`, or its kind as a string) and
``depends_on`` (names of processors of the same pipeline whose output it reads). The
pipeline orders processors by their dependencies (declared order among independent ones)
and gives each one only the messages its trigger fired for since its last recorded run,
so the work of a run after one new message is proportional to that message.

Everything here is pure: the store supplies what the processors saw before (``seen``: the
newest message index each one handled, from ``processor_runs``) and the stored token
counts of the visible messages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import canonical_json


@dataclass(frozen=True)
class Trigger:
    """When a processor runs, and which messages it is given then.

    Attributes:
        kind: One of the constants below.
        tokens: For ``tokens_over``, the visible-token total that must be exceeded; for
            ``aged_out``, the tokens of the newest messages that are retained.
    """

    kind: str
    tokens: int | None = None

    EVERY_RENDER = "every_render"
    """Every run, on the whole view (what a processor without a ``trigger`` gets)."""
    NEW_MESSAGE = "new_message"
    """When messages were added since the last run: given those messages."""
    TOKENS_OVER = "tokens_over"
    """When the visible messages' stored token counts add up to more than ``tokens``:
    given the visible messages not handled yet."""
    AGED_OUT = "aged_out"
    """When messages leave the retained window (the newest messages holding ``tokens``
    tokens; a message is aged out when the tokens of the messages after it exceed that):
    given the aged-out messages not handled yet."""
    ON_DEMAND = "on_demand"
    """Only when a run names the processor (``run_processors(cid, demand=[name])``):
    given the visible messages not handled yet."""

    KINDS = frozenset({EVERY_RENDER, NEW_MESSAGE, TOKENS_OVER, AGED_OUT, ON_DEMAND})

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise InvalidInputError(
                f"trigger {self.kind!r:.40} is not known; use one of "
                f"{', '.join(sorted(self.KINDS))}."
            )
        needs_tokens = self.kind in (self.TOKENS_OVER, self.AGED_OUT)
        if needs_tokens and (
            isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0
        ):
            raise InvalidInputError(f"a {self.kind} trigger needs tokens, a non-negative int.")
        if not needs_tokens and self.tokens is not None:
            raise InvalidInputError(f"a {self.kind} trigger takes no tokens.")

    @classmethod
    def every_render(cls) -> Trigger:
        """Every run, on the whole view."""
        return cls(cls.EVERY_RENDER)

    @classmethod
    def new_message(cls) -> Trigger:
        """On each new message, given the new messages."""
        return cls(cls.NEW_MESSAGE)

    @classmethod
    def tokens_over(cls, tokens: int) -> Trigger:
        """When the visible tokens exceed ``tokens``."""
        return cls(cls.TOKENS_OVER, tokens)

    @classmethod
    def aged_out(cls, retain_tokens: int) -> Trigger:
        """When messages age out of a window retaining ``retain_tokens`` tokens."""
        return cls(cls.AGED_OUT, retain_tokens)

    @classmethod
    def on_demand(cls) -> Trigger:
        """Only when asked for by name."""
        return cls(cls.ON_DEMAND)

    @property
    def label(self) -> str:
        """The kind, with its token figure: ``"aged_out:4000"``."""
        return self.kind if self.tokens is None else f"{self.kind}:{self.tokens}"

    @property
    def incremental(self) -> bool:
        """True when the processor is given only what its trigger fired for."""
        return self.kind != self.EVERY_RENDER

    @property
    def needs_tokens(self) -> bool:
        """True when firing reads the messages' token counts."""
        return self.kind in (self.TOKENS_OVER, self.AGED_OUT)


def trigger_of(processor: Any) -> Trigger:
    """The processor's declared trigger (``every_render`` when it declares none).

    Raises:
        InvalidInputError: ``trigger`` is neither a :class:`Trigger` nor a kind without
            parameters.
    """
    declared = getattr(processor, "trigger", None)
    if declared is None:
        return Trigger.every_render()
    if isinstance(declared, Trigger):
        return declared
    if isinstance(declared, str):
        return Trigger(declared)
    raise InvalidInputError(
        f"processor {getattr(processor, 'name', '?')!r}: trigger must be a Trigger or its kind."
    )


def depends_of(processor: Any) -> tuple[str, ...]:
    """The names the processor declares in ``depends_on`` (none by default)."""
    declared = getattr(processor, "depends_on", ()) or ()
    if isinstance(declared, str):
        return (declared,)
    if not isinstance(declared, Iterable) or not all(isinstance(n, str) for n in declared):
        raise InvalidInputError(
            f"processor {getattr(processor, 'name', '?')!r}: depends_on must list processor names."
        )
    return tuple(declared)


def dependency_order(processors: Sequence[Any]) -> list[Any]:
    """``processors`` sorted so each comes after those it depends on; otherwise in declared
    order (a stable topological sort).

    Raises:
        InvalidInputError: two processors share a name, one depends on a name the pipeline
            does not have, or the dependencies form a cycle (named in the message).
    """
    names = [str(getattr(p, "name", "")) for p in processors]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    needs = {name: depends_of(p) for name, p in zip(names, processors, strict=True)}
    if duplicates and any(needs.values()):
        raise InvalidInputError(
            f"processors {duplicates} share a name; give each a distinct name so that "
            "depends_on can name it."
        )
    for name, wanted in needs.items():
        unknown = [w for w in wanted if w not in needs]
        if unknown:
            raise InvalidInputError(
                f"processor {name!r} depends on {unknown}, which the pipeline does not have; "
                f"it has {names}."
            )
    ordered: list[Any] = []
    placed: set[str] = set()
    remaining = list(zip(names, processors, strict=True))
    while remaining:
        for position, (name, processor) in enumerate(remaining):
            if all(w in placed for w in needs[name]):
                ordered.append(processor)
                placed.add(name)
                del remaining[position]
                break
        else:
            raise InvalidInputError(
                f"processors {_cycle(needs, {n for n, _ in remaining})} depend on each other in "
                "a cycle; remove one of these depends_on entries."
            )
    return ordered


def _cycle(needs: Mapping[str, tuple[str, ...]], stuck: set[str]) -> str:
    """One cycle among ``stuck``, as ``"a -> b -> a"``."""
    start = min(stuck)
    path = [start]
    while True:
        following = min(w for w in needs[path[-1]] if w in stuck)
        if following in path:
            return " -> ".join([*path[path.index(following) :], following])
        path.append(following)


def processor_key(processor: Any, trigger: Trigger) -> str:
    """SHA-256 of a processor's name, type, config and trigger: the identity its run state is
    kept under (a changed config starts from nothing).

    Raises:
        InvalidInputError: the processor's config is not JSON-serialisable.
    """
    value = {
        "name": processor.name,
        "type": type(processor).__qualname__,
        "config": processor.config(),
        "trigger": trigger.label,
    }
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"the config of processor {processor.name!r} is not JSON-serialisable ({exc}); "
            "return plain values from config()"
        ) from exc
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Firing:
    """A processor's trigger fired: the messages it is given and its state after the run."""

    trigger: str
    messages: tuple[int, ...]
    seen_through: int


def fire(
    trigger: Trigger,
    visible: Sequence[int],
    seen: int,
    *,
    tokens: Mapping[int, int] | None = None,
    demanded: bool = False,
    rewritten: Collection[int] = (),
) -> Firing | None:
    """Whether ``trigger`` fires on a view, and for which messages.

    Args:
        trigger: The processor's trigger.
        visible: The visible message indices, in order.
        seen: The newest message index the processor handled before (-1: none).
        tokens: Stored token count per message index (for the token triggers).
        demanded: The run names this processor.
        rewritten: Visible messages whose text a rewrite from outside the pipeline now
            shows (a manual update, a notice with its summary): a ``new_message``
            processor is given those it handled before again, on every run (a few
            messages), since the rewrite may have come after it read them.

    Returns:
        None when the trigger does not fire; else a :class:`Firing` (its messages may be
        empty only for ``every_render`` on an empty view).
    """
    newest = visible[-1] if visible else seen
    if trigger.kind == Trigger.EVERY_RENDER:
        return Firing(trigger.label, tuple(visible), max(seen, newest))
    unseen = tuple(i for i in visible if i > seen)
    if trigger.kind == Trigger.NEW_MESSAGE:
        again = [i for i in rewritten if i <= seen]
        if again:
            given = tuple(sorted({*unseen, *again}))
            return Firing(trigger.label, given, max([seen, *unseen]))
        fired = bool(unseen)
    elif trigger.kind == Trigger.ON_DEMAND:
        fired = demanded and bool(unseen)
    elif trigger.kind == Trigger.TOKENS_OVER:
        counts = tokens or {}
        fired = bool(unseen) and sum(counts.get(i, 0) for i in visible) > (trigger.tokens or 0)
    else:
        counts = tokens or {}
        newer = 0
        aged: list[int] = []
        for idx in reversed(visible):
            if newer > (trigger.tokens or 0):
                aged.append(idx)
            newer += counts.get(idx, 0)
        unseen = tuple(sorted(i for i in aged if i > seen))
        fired = bool(unseen)
    if not fired:
        return None
    return Firing(trigger.label, unseen, unseen[-1])


def plan_firings(
    processors: Sequence[Any],
    visible: Sequence[int],
    seen: Mapping[str, int],
    *,
    tokens: Mapping[int, int] | None = None,
    demand: Collection[str] = (),
    rewritten: Collection[int] = (),
) -> dict[str, Firing]:
    """The processors whose trigger fires, by name, with what each is given.

    ``seen`` maps a processor's :func:`processor_key` to the newest message index it
    handled (absent: none); ``rewritten`` is as :func:`fire` takes it.
    """
    firings: dict[str, Firing] = {}
    for processor in processors:
        trigger = trigger_of(processor)
        handled = seen.get(processor_key(processor, trigger), -1)
        firing = fire(
            trigger,
            visible,
            handled,
            tokens=tokens,
            demanded=processor.name in demand,
            rewritten=rewritten,
        )
        if firing is not None:
            firings[processor.name] = firing
    return firings
