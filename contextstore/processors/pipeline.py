"""Running processors in order, and recognising proposals that have gone stale.

Processors run in dependency order (``depends_on``; the declared order among the others,
see :mod:`contextstore.processors.triggers`); each one reads the view with the proposals of the
ones before it already applied, so a trimmer after a masker trims masked text. Every
accepted proposal is returned, in order: the store writes them as ``context_updates``
rows with increasing ``ts``, and since the newest update of a block wins, the last
proposal for a block (which was computed from the earlier ones' output) is what the model
sees, while each processor's step stays in the audit trail.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.overlays import (
    Block,
    BlockAddress,
    BlockUpdate,
    Message,
    OverlayMap,
    UpdateMode,
    apply_overlays,
    text_hash,
)
from contextstore.core.system_prompt import rewrite_system_texts
from contextstore.core.validate import (
    MAX_MESSAGE_BYTES,
    check_flags,
    check_free_text,
    check_json_value,
    clipped_text,
)
from contextstore.core.view import IndexedView
from contextstore.processors.base import (
    Processor,
    block_count,
    canonical_json,
    message_blocks,
    readable_text,
)
from contextstore.processors.checks import checked_processors, checked_proposals
from contextstore.processors.secrets import SecretMasker
from contextstore.processors.triggers import (
    Firing,
    dependency_order,
    depends_of,
    processor_key,
    trigger_of,
)

MEMO_MESSAGES = 8192
"""Per-message results a pipeline remembers for its incremental processors."""


@dataclass(frozen=True)
class ProcessorStep:
    """What one processor of a run proposed and what became of it.

    Attributes:
        name: The processor's name.
        accepted: Its proposals that were kept, in view order.
        dropped: Its proposals that were stale against the view it read, or repeated an
            address it had already proposed for (a processor bug, kept for diagnosis).
        reasons: Why each of ``dropped`` was dropped, in the same order.
        trigger: The trigger that fired (``every_render`` when none was declared).
        given: The message indices the processor was given (read).
        nodes_given: The blocks of those messages.
        reused: Messages whose earlier result for the same content was reused instead.
        seen_through: The newest message index handled after this run.
        proposed: How many proposals the processor returned (reused ones included).
    """

    name: str
    accepted: tuple[BlockUpdate, ...]
    dropped: tuple[BlockUpdate, ...]
    reasons: tuple[str, ...] = ()
    trigger: str = "every_render"
    given: tuple[int, ...] = ()
    nodes_given: int = 0
    reused: int = 0
    seen_through: int = -1
    proposed: int = 0

    @property
    def outcome(self) -> str:
        """``applied``, ``dropped_stale`` (every proposal dropped) or ``no_change``."""
        if self.accepted:
            return "applied"
        return "dropped_stale" if self.dropped else "no_change"


class _Identity:
    """A key part that stands for one object, by identity (it may be unhashable)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.value is self.value


@dataclass(frozen=True)
class PipelineReport:
    """The outcome of :meth:`Pipeline.run_report`.

    Attributes:
        updates: Every accepted proposal, in the order to write them.
        steps: One :class:`ProcessorStep` per processor, in declared order.
        view: The view with all accepted proposals applied (what the model will see).
    """

    updates: tuple[BlockUpdate, ...]
    steps: tuple[ProcessorStep, ...]
    view: tuple[tuple[int, Message], ...]


class _WorkingView:
    """The view being processed, updated in place as proposals are accepted.

    Only this object's list changes: messages are replaced by new ones built with
    :func:`~contextstore.core.overlays.apply_overlays`, never edited.
    """

    def __init__(self, view: IndexedView, overlays: OverlayMap | None = None) -> None:
        self.items: list[tuple[int, Message]] = list(view)
        self.positions = {idx: pos for pos, (idx, _) in enumerate(self.items)}
        self.modes: dict[BlockAddress, str] = {
            address: update.mode for address, update in (overlays or {}).items()
        }

    def block(self, address: BlockAddress) -> Block | None:
        position = self.positions.get(address[0])
        if position is None:
            return None
        return dict(message_blocks(self.items[position][1])).get(address[1])

    def stale_reason(self, update: BlockUpdate) -> str | None:
        """Why ``update`` no longer fits the view, or None when it does."""
        block = self.block(update.address)
        if block is None:
            return f"block {update.message_idx}.{update.block_idx} is not in the view"
        read = readable_text(block, update.mode)
        if read is None:
            return (
                f"block {update.message_idx}.{update.block_idx} has nothing a "
                f"{update.mode} rewrite can read"
            )
        if update.base_hash is not None and text_hash(read) != update.base_hash:
            return (
                f"block {update.message_idx}.{update.block_idx} changed since it was read "
                "(base_hash mismatch)"
            )
        return None

    def is_stale(self, update: BlockUpdate) -> bool:
        return self.stale_reason(update) is not None

    def promote(self, update: BlockUpdate) -> BlockUpdate:
        """Turn a TEXT update of a block already replaced whole into a BLOCK update.

        The store shows only the newest update of a block, applied to the original. A
        TEXT update applied to an original image (or to a list-content tool result) would
        bring the medium back; as a BLOCK update it yields what the processor saw.
        """
        if update.mode != UpdateMode.TEXT or self.modes.get(update.address) != UpdateMode.BLOCK:
            return update
        block = self.block(update.address)
        read = readable_text(block, UpdateMode.BLOCK) if block is not None else None
        if read is None:
            return update
        return dataclasses.replace(update, mode=UpdateMode.BLOCK, base_hash=text_hash(read))

    def apply(self, update: BlockUpdate) -> None:
        position = self.positions[update.message_idx]
        idx, message = self.items[position]
        self.items[position] = (idx, apply_overlays(message, idx, {update.address: update}))
        self.modes[update.address] = update.mode

    def accept(self, name: str, proposals: Iterable[BlockUpdate]) -> ProcessorStep:
        accepted: list[BlockUpdate] = []
        dropped: list[BlockUpdate] = []
        reasons: list[str] = []
        seen: set[BlockAddress] = set()
        for update in proposals:
            if update.mode not in UpdateMode.ALL:
                raise InvalidInputError(
                    f"processor {name!r} proposed an update with unknown mode {update.mode!r}; "
                    f"use one of {sorted(UpdateMode.ALL)}"
                )
            check_free_text(
                f"the text processor {name!r} proposed",
                update.text,
                MAX_MESSAGE_BYTES,
                optional=False,
                allow_nul=True,
            )
            check_json_value(f"the metadata processor {name!r} proposed", update.metadata)
            reason = (
                "a second proposal for a block it already rewrote in this run"
                if update.address in seen
                else self.stale_reason(update)
            )
            if reason is not None:
                dropped.append(update)
                reasons.append(reason)
                continue
            seen.add(update.address)
            update = self.promote(update)
            self.apply(update)
            accepted.append(update)
        accepted.sort(key=lambda u: (self.positions[u.message_idx], u.block_idx))
        return ProcessorStep(name, tuple(accepted), tuple(dropped), tuple(reasons))


def is_stale(update: BlockUpdate, view: IndexedView) -> bool:
    """Return True if ``update`` no longer fits ``view``.

    An update is stale when its message or block is not in the view, when the block has
    nothing its mode can read, or when the hash of what it would read differs from its
    ``base_hash`` (an update without a ``base_hash`` is only checked for its target).
    """
    return _WorkingView(view).is_stale(update)


def drop_stale(updates: Iterable[BlockUpdate], view: IndexedView) -> list[BlockUpdate]:
    """Return the updates of ``updates`` that still fit ``view``, in order.

    Updates are checked one after another, each against the view with the kept ones
    before it applied, which is how the output of :meth:`Pipeline.run` chains: a later
    processor's update of a block was based on the earlier one's text.
    """
    working = _WorkingView(view)
    kept: list[BlockUpdate] = []
    for update in updates:
        if working.is_stale(update):
            continue
        working.apply(update)
        kept.append(update)
    return kept


class _Given:
    """What a processor is given in one run: the whole view, or the messages its trigger
    fired for (``firing``), with per-message results reused from the pipeline's memo."""

    def __init__(self, processor: Processor, firing: Firing | None, memo: _Memo | None) -> None:
        self.processor = processor
        self.firing = firing
        trigger = trigger_of(processor)
        self.trigger = firing.trigger if firing is not None else trigger.label
        # Results are remembered per message only when they depend on nothing else, and
        # when computing them costs more than the hash that finds them (``memoize``).
        self.memo = (
            memo
            if memo is not None
            and trigger.incremental
            and bool(getattr(processor, "independent", False))
            and bool(getattr(processor, "memoize", True))
            else None
        )
        self.key = processor_key(processor, trigger) if self.memo is not None else ""

    def propose(self, items: list[tuple[int, Message]]) -> tuple[list[BlockUpdate], dict[str, Any]]:
        """Run the processor on what it is given; returns its proposals and the counts."""
        wanted = None if self.firing is None else set(self.firing.messages)
        chosen = items if wanted is None else [item for item in items if item[0] in wanted]
        reused: list[BlockUpdate] = []
        hashes: dict[int, str] = {}
        if self.memo is not None:
            fresh = []
            for idx, message in chosen:
                digest = text_hash(canonical_json(message))
                found = self.memo.get((self.key, idx, digest))
                if found is None:
                    hashes[idx] = digest
                    fresh.append((idx, message))
                else:
                    reused.extend(found)
            reused_count = len(chosen) - len(fresh)
            chosen = fresh
        else:
            reused_count = 0
        proposals = (
            checked_proposals(self.processor.name, self.processor.propose(tuple(chosen)))
            if chosen
            else []
        )
        if self.memo is not None:
            by_message: dict[int, list[BlockUpdate]] = {idx: [] for idx in hashes}
            for update in proposals:
                by_message.setdefault(update.message_idx, []).append(update)
            for idx, digest in hashes.items():
                self.memo.put((self.key, idx, digest), tuple(by_message[idx]))
        counts = {
            "given": tuple([i for i, _ in chosen]),
            "nodes_given": sum([block_count(m) for _, m in chosen]),
            "reused": reused_count,
            "proposed": len(proposals) + len(reused),
        }
        return reused + proposals, counts


class _Memo:
    """Per-message proposals of incremental processors, keyed by the processor's identity,
    the message index and the hash of the message as it was given (an LRU)."""

    def __init__(self, size: int = MEMO_MESSAGES) -> None:
        self._entries: OrderedDict[tuple[str, int, str], tuple[BlockUpdate, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.size = size

    def get(self, key: tuple[str, int, str]) -> tuple[BlockUpdate, ...] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, int, str], value: tuple[BlockUpdate, ...]) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class Pipeline:
    """Processors run over a view, in dependency order, to produce context updates."""

    def __init__(self, processors: Iterable[Processor], *, parallel: bool = False) -> None:
        """Create a pipeline of ``processors``.

        They run in the given order, except that a processor naming others in its
        ``depends_on`` runs after them. With ``parallel``, consecutive independent
        processors run concurrently when the store runs the pipeline (the result equals the
        sequential one).

        Raises:
            InvalidInputError: ``processors`` is not a collection of processors (each with
                a ``name`` string and ``config`` and ``propose`` methods), a config is not
                JSON-serialisable, the dependencies name a missing processor or form a
                cycle, or a trigger is malformed; ``parallel`` is not ``True`` or ``False``.
        """
        check_flags(parallel=parallel)
        self.processors: tuple[Processor, ...] = checked_processors(processors)
        self.ordered: tuple[Processor, ...] = tuple(dependency_order(self.processors))
        for processor in self.processors:
            trigger_of(processor)
        self.config()
        self.parallel = parallel
        self._memo = _Memo()

    @property
    def local(self) -> bool:
        """True when every processor declares ``local = True``: it runs the store's own code
        only, no hook of the caller's (an LLM call). A prepare with such a pipeline, whose
        conversation other writers keep changing while it plans, makes its last attempt
        holding the conversation's write lock, which only local work may hold; a processor
        that does not say so is taken to call out."""
        return all(getattr(p, "local", False) is True for p in self.processors)

    @property
    def needs_tokens(self) -> bool:
        """True when a trigger reads the messages' token counts."""
        return any(trigger_of(p).needs_tokens for p in self.processors)

    @property
    def incremental(self) -> bool:
        """True when some processor is given only what its trigger fired for."""
        return any(trigger_of(p).incremental for p in self.processors)

    def config(self) -> dict[str, Any]:
        """Return the ordered names, classes, configs and triggers of the processors.

        Raises:
            InvalidInputError: A processor's config is not JSON-serialisable.
        """
        result = {"processors": [self._describe(processor) for processor in self.processors]}
        try:
            canonical_json(result)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"a processor config is not JSON-serialisable ({exc}); return plain values "
                "from config()"
            ) from exc
        return result

    def rewrite_system(
        self, system: str | list[dict[str, Any]] | None
    ) -> str | list[dict[str, Any]] | None:
        """``system`` (a system prompt) as the processors defining ``rewrite_system`` leave
        it, in order (None stays None). A prompt given as text blocks has each block's text
        passed through the hook, its other fields (``cache_control``) kept.

        Raises:
            InvalidInputError: a processor returned something other than valid text.
        """
        for processor in self.processors:
            rewrite = getattr(processor, "rewrite_system", None)
            if system is None or not callable(rewrite):
                continue
            system = rewrite_system_texts(system, rewrite)
            texts = [system] if isinstance(system, str) else [b["text"] for b in system]
            for text in texts:
                check_free_text(
                    f"the system prompt processor {processor.name!r} returned", text, optional=False
                )
        return system

    def rewrite_tools(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        """``tools`` (a prepared request's tool definitions) as the processors defining
        ``rewrite_tools`` leave them, in order (None stays None).

        Raises:
            InvalidInputError: a processor returned something other than the same tools
                (a list of as many JSON objects, with the same names, in the same order).
        """
        for processor in self.processors:
            rewrite = getattr(processor, "rewrite_tools", None)
            if tools is None or not callable(rewrite):
                continue
            names = [tool.get("name") for tool in tools]
            rewritten = rewrite(tools)
            if (
                not isinstance(rewritten, list)
                or not all(isinstance(tool, dict) for tool in rewritten)
                or [tool.get("name") for tool in rewritten] != names
            ):
                raise InvalidInputError(
                    f"the tools processor {processor.name!r} returned something other than the "
                    "tools it was given; return a list of the same tool definitions, in order, "
                    "with their names unchanged."
                )
            check_json_value(f"the tools processor {processor.name!r} returned", rewritten)
            tools = rewritten
        return tools

    @staticmethod
    def _describe(processor: Processor) -> dict[str, Any]:
        described: dict[str, Any] = {
            "name": processor.name,
            "type": type(processor).__qualname__,
            "config": processor.config(),
        }
        trigger = trigger_of(processor)
        if trigger.incremental:
            described["trigger"] = trigger.label
        if depends_of(processor):
            described["depends_on"] = list(depends_of(processor))
        return described

    def config_key(self) -> str:
        """Return a SHA-256 of :meth:`config`, for a render-cache key."""
        return hashlib.sha256(canonical_json(self.config()).encode("utf-8")).hexdigest()

    def render_key(self) -> tuple[Any, ...]:
        """The render-cache key of this pipeline: :meth:`config_key` and the hooks of the
        caller's its processors hold (a
        :class:`~contextstore.processors.summarize.Summarizer`'s ``hook``), by identity. A
        config names a hook by its qualified name, which two lambdas or two closures of one
        factory share: their renders must not answer for each other."""
        hooks = (getattr(p, "hook", None) for p in self.processors)
        return (self.config_key(), *(_Identity(hook) for hook in hooks if callable(hook)))

    def forget(self) -> None:
        """Drop the per-message results remembered for incremental processors."""
        self._memo.clear()

    def run(
        self,
        view: IndexedView,
        *,
        parallel: bool = False,
        overlays: OverlayMap | None = None,
    ) -> list[BlockUpdate]:
        """Run every processor over ``view`` and return the accepted proposals in order.

        See :meth:`run_report` for the arguments.
        """
        return list(self.run_report(view, parallel=parallel, overlays=overlays).updates)

    def run_report(
        self,
        view: IndexedView,
        *,
        parallel: bool = False,
        overlays: OverlayMap | None = None,
        firings: Mapping[str, Firing] | None = None,
        memo: bool = False,
    ) -> PipelineReport:
        """Run the processors over ``view``; report the proposals and the final view.

        Args:
            view: The visible messages with their original indices, overlays applied.
                It is not modified.
            parallel: Let consecutive processors whose ``independent`` attribute is True
                read the same view concurrently in a thread pool. Their proposals are
                merged in order; a processor that follows one whose proposals
                changed the view is run again on the merged view, so the result always
                equals the sequential one.
            overlays: The effective updates already applied to ``view``, if known. Used
                only to turn a later TEXT proposal on a block that an earlier update
                replaced whole into a BLOCK update (see ``_WorkingView.promote``).
            firings: Which processors run and on which messages (see
                :func:`~contextstore.processors.triggers.plan_firings`); a processor not
                named does not run. None: every processor runs on the whole view.
            memo: Reuse, for an incremental independent processor, what it proposed
                before for a message with the same index and content.

        Returns:
            A :class:`PipelineReport`.
        """
        working = _WorkingView(view, overlays)
        steps: list[ProcessorStep] = []
        active = [
            _Given(p, None if firings is None else firings[p.name], self._memo if memo else None)
            for p in self.ordered
            if firings is None or p.name in firings
        ]
        for batch in self._batches(active, parallel):
            steps.extend(self._run_batch(batch, working))
        updates = tuple(update for step in steps for update in step.accepted)
        return PipelineReport(updates, tuple(steps), tuple(working.items))

    @staticmethod
    def _batches(active: list[_Given], parallel: bool) -> list[list[_Given]]:
        """Group processors: consecutive independent ones share a batch when parallel,
        unless one depends on another of the batch."""
        batches: list[tuple[list[_Given], bool]] = []
        for given in active:
            processor = given.processor
            independent = parallel and bool(getattr(processor, "independent", False))
            if (
                independent
                and batches
                and batches[-1][1]
                and not set(depends_of(processor)) & {g.processor.name for g in batches[-1][0]}
            ):
                batches[-1][0].append(given)
            else:
                batches.append(([given], independent))
        return [batch for batch, _ in batches]

    @staticmethod
    def _step(
        working: _WorkingView, given: _Given, proposals: list[BlockUpdate], counts: dict[str, Any]
    ) -> ProcessorStep:
        step = working.accept(given.processor.name, proposals)
        seen = given.firing.seen_through if given.firing is not None else -1
        return dataclasses.replace(step, trigger=given.trigger, seen_through=seen, **counts)

    @classmethod
    def _run_batch(cls, batch: list[_Given], working: _WorkingView) -> list[ProcessorStep]:
        if len(batch) == 1:
            return [cls._step(working, batch[0], *_guarded(batch[0], list(working.items)))]
        snapshot = list(working.items)
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            futures = [pool.submit(_guarded, given, snapshot) for given in batch]
        results = [future.result() for future in futures]
        steps: list[ProcessorStep] = []
        changed = False
        for given, (proposals, counts) in zip(batch, results, strict=True):
            if changed:
                proposals, counts = _guarded(given, list(working.items))
            step = cls._step(working, given, proposals, counts)
            changed = changed or bool(step.accepted)
            steps.append(step)
        return steps


def _guarded(
    given: _Given, items: list[tuple[int, Message]]
) -> tuple[list[BlockUpdate], dict[str, Any]]:
    """``given.propose(items)``; an exception leaves naming the processor that raised it
    (``failed_processor`` on the exception), so a recorded run can say which one failed.
    One that is not a :class:`ContextStoreError` (a caller's processor raising
    ``ValueError``) leaves as a :class:`ContextStoreError` saying so, with it as the cause,
    as a failing summarizer does."""
    name = given.processor.name
    try:
        return given.propose(items)
    except ContextStoreError as exc:
        if getattr(exc, "failed_processor", None) is None:
            exc.failed_processor = name  # type: ignore[attr-defined]
        raise
    except Exception as exc:
        said = clipped_text(str(exc), MAX_REASON_SHOWN)
        failed = ContextStoreError(
            f"the processor {name!r} failed ({type(exc).__name__}: {said}); nothing it "
            "proposed was written. Fix the processor or leave it out of the pipeline."
        )
        failed.failed_processor = name  # type: ignore[attr-defined]
        raise failed from exc


MAX_REASON_SHOWN = 500
"""The most characters of a failing processor's own message its error repeats."""


def default_pipeline() -> Pipeline:
    """Return the pipeline used when none is configured: high-confidence secret masking."""
    return Pipeline([SecretMasker()])
