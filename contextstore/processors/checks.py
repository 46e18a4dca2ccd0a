"""What a pipeline takes from the caller's processors: checked when the pipeline is made
and when a processor proposes, so that a wrong object is an InvalidInputError naming it
rather than an AttributeError at the first render."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import BlockUpdate
from contextstore.core.validate import shown
from contextstore.processors.base import Processor


def checked_processors(processors: Any) -> tuple[Processor, ...]:
    """``processors`` as a tuple, each checked to look like a :class:`Processor`.

    Raises:
        InvalidInputError: ``processors`` is a string, a mapping or not iterable, or one of
            them has no ``name`` string or no ``config`` or ``propose`` method.
    """
    if isinstance(processors, str | bytes | Mapping) or not isinstance(processors, Iterable):
        raise InvalidInputError(
            f"Pipeline takes a list of processors, got {shown(processors)}; pass e.g. "
            "Pipeline([SecretMasker(), OutputTrimmer()])."
        )
    checked = tuple(processors)
    for position, processor in enumerate(checked):
        name = getattr(processor, "name", None)
        if (
            not isinstance(name, str)
            or not name
            or not callable(getattr(processor, "config", None))
            or not callable(getattr(processor, "propose", None))
        ):
            raise InvalidInputError(
                f"processor {position} of the pipeline is not a processor: "
                f"{shown(processor)}; give it a non-empty name string and config() and "
                "propose(view) methods (see contextstore.processors.base.Processor)."
            )
    return checked


def checked_proposals(name: str, proposals: Any) -> list[BlockUpdate]:
    """A processor's ``propose`` result as a list of :class:`BlockUpdate`.

    Raises:
        InvalidInputError: it is not an iterable of ``BlockUpdate``.
    """
    if isinstance(proposals, str | bytes | Mapping) or not isinstance(proposals, Iterable):
        raise InvalidInputError(
            f"processor {name!r} returned {shown(proposals)} from propose(); return a list "
            "of BlockUpdate (an empty list for no change)."
        )
    checked = list(proposals)
    for proposal in checked:
        if not isinstance(proposal, BlockUpdate):
            raise InvalidInputError(
                f"processor {name!r} proposed {shown(proposal)}; propose() must return "
                "BlockUpdate objects."
            )
    return checked
