"""The bases every content block model shares: strict blocks that keep unknown fields, the
provider settings that refuse them, and the prompt-caching breakpoint.

:mod:`.block_models` (the blocks of any provider's history) and :mod:`.server_blocks`
(Anthropic's server tools) build on them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class StrictBlock(BaseModel):
    """A block, or an object inside one: strict (a value of another type is refused, never
    converted: ``"yes"`` is not True, 1 is not ``"1"``; the store keeps the caller's value,
    and a provider would refuse it), keeping every field it does not declare, since agents
    add their own."""

    model_config = ConfigDict(extra="allow", strict=True)


class Setting(BaseModel):
    """A provider's setting, sent as it is: a field it does not define would be refused."""

    model_config = ConfigDict(extra="forbid", strict=True)


class CacheControl(Setting):
    """A prompt-caching breakpoint: ``{"type": "ephemeral"}``, ``ttl`` ``"5m"`` or ``"1h"``."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"
