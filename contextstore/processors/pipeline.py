"""Running processors in order, and recognising proposals that have gone stale.

Processors run in the order declared; each one reads the view with the proposals of the
ones before it already applied, so a trimmer after a masker trims masked text. Every
accepted proposal is returned, in order: the store writes them as ``context_updates``
rows with increasing ``ts``, and since the newest update of a block wins, the last
proposal for a block (which was computed from the earlier ones' output) is what the model
sees, while each processor's step stays in the audit trail.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import InvalidInputError
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
from contextstore.core.validate import MAX_MESSAGE_BYTES, check_free_text, check_json_value
from contextstore.core.view import IndexedView
from contextstore.processors.base import (
    Processor,
    canonical_json,
    message_blocks,
    readable_text,
)
from contextstore.processors.secrets import SecretMasker


@dataclass(frozen=True)
class ProcessorStep:
    """What one processor of a run proposed and what became of it.

    Attributes:
        name: The processor's name.
        accepted: Its proposals that were kept, in view order.
        dropped: Its proposals that were stale against the view it read, or repeated an
            address it had already proposed for (a processor bug, kept for diagnosis).
    """

    name: str
    accepted: tuple[BlockUpdate, ...]
    dropped: tuple[BlockUpdate, ...]


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

    def is_stale(self, update: BlockUpdate) -> bool:
        block = self.block(update.address)
        if block is None:
            return True
        read = readable_text(block, update.mode)
        if read is None:
            return True
        return update.base_hash is not None and text_hash(read) != update.base_hash

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
            if update.address in seen or self.is_stale(update):
                dropped.append(update)
                continue
            seen.add(update.address)
            update = self.promote(update)
            self.apply(update)
            accepted.append(update)
        accepted.sort(key=lambda u: (self.positions[u.message_idx], u.block_idx))
        return ProcessorStep(name, tuple(accepted), tuple(dropped))


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


class Pipeline:
    """An ordered list of processors, run over a view to produce context updates."""

    def __init__(self, processors: Iterable[Processor], *, parallel: bool = False) -> None:
        """Create a pipeline that runs ``processors`` in the given order.

        With ``parallel``, consecutive independent processors run concurrently when the
        store runs the pipeline (the result equals the sequential one).
        """
        self.processors: tuple[Processor, ...] = tuple(processors)
        self.parallel = parallel

    def config(self) -> dict[str, Any]:
        """Return the ordered names, classes and configs of the processors.

        Raises:
            InvalidInputError: A processor's config is not JSON-serialisable.
        """
        result = {
            "processors": [
                {
                    "name": processor.name,
                    "type": type(processor).__qualname__,
                    "config": processor.config(),
                }
                for processor in self.processors
            ]
        }
        try:
            canonical_json(result)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"a processor config is not JSON-serialisable ({exc}); return plain values "
                "from config()"
            ) from exc
        return result

    def rewrite_system(self, text: str | None) -> str | None:
        """``text`` (a system prompt) as the processors defining ``rewrite_system`` leave it,
        in order (None stays None).

        Raises:
            InvalidInputError: a processor returned something other than valid text.
        """
        for processor in self.processors:
            rewrite = getattr(processor, "rewrite_system", None)
            if text is None or not callable(rewrite):
                continue
            text = rewrite(text)
            check_free_text(
                f"the system prompt processor {processor.name!r} returned", text, optional=False
            )
        return text

    def config_key(self) -> str:
        """Return a SHA-256 of :meth:`config`, for a render-cache key."""
        return hashlib.sha256(canonical_json(self.config()).encode("utf-8")).hexdigest()

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
    ) -> PipelineReport:
        """Run every processor over ``view``; report the proposals and the final view.

        Args:
            view: The visible messages with their original indices, overlays applied.
                It is not modified.
            parallel: Let consecutive processors whose ``independent`` attribute is True
                read the same view concurrently in a thread pool. Their proposals are
                merged in declared order; a processor that follows one whose proposals
                changed the view is run again on the merged view, so the result always
                equals the sequential one.
            overlays: The effective updates already applied to ``view``, if known. Used
                only to turn a later TEXT proposal on a block that an earlier update
                replaced whole into a BLOCK update (see ``_WorkingView.promote``).

        Returns:
            A :class:`PipelineReport`.
        """
        working = _WorkingView(view, overlays)
        steps: list[ProcessorStep] = []
        for batch in self._batches(parallel):
            steps.extend(self._run_batch(batch, working))
        updates = tuple(update for step in steps for update in step.accepted)
        return PipelineReport(updates, tuple(steps), tuple(working.items))

    def _batches(self, parallel: bool) -> list[list[Processor]]:
        """Group processors: consecutive independent ones share a batch when parallel."""
        batches: list[tuple[list[Processor], bool]] = []
        for processor in self.processors:
            independent = parallel and bool(getattr(processor, "independent", False))
            if independent and batches and batches[-1][1]:
                batches[-1][0].append(processor)
            else:
                batches.append(([processor], independent))
        return [batch for batch, _ in batches]

    @staticmethod
    def _run_batch(batch: list[Processor], working: _WorkingView) -> list[ProcessorStep]:
        if len(batch) == 1:
            return [working.accept(batch[0].name, batch[0].propose(tuple(working.items)))]
        snapshot = tuple(working.items)
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            futures = [pool.submit(processor.propose, snapshot) for processor in batch]
        results = [future.result() for future in futures]
        steps: list[ProcessorStep] = []
        changed = False
        for processor, proposals in zip(batch, results, strict=True):
            if changed:
                proposals = processor.propose(tuple(working.items))
            step = working.accept(processor.name, proposals)
            changed = changed or bool(step.accepted)
            steps.append(step)
        return steps


def default_pipeline() -> Pipeline:
    """Return the pipeline used when none is configured: high-confidence secret masking."""
    return Pipeline([SecretMasker()])
