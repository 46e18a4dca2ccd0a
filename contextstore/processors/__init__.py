"""Pure processors: read the view, propose block rewrites as context updates.

Nothing here does I/O. The store runs a :class:`Pipeline` over the visible messages,
writes the accepted proposals as ``context_updates`` rows and keeps every original.
"""

from __future__ import annotations

from contextstore.core.view import IndexedView
from contextstore.processors.base import Processor, readable_text
from contextstore.processors.degrade import MediaDegrader, media_pointer
from contextstore.processors.distill import Distiller, distill_text
from contextstore.processors.pipeline import (
    Pipeline,
    PipelineReport,
    ProcessorStep,
    default_pipeline,
    drop_stale,
    is_stale,
)
from contextstore.processors.secret_patterns import PATTERNS, SecretPattern
from contextstore.processors.secret_text import Finding, find_secrets, mask_text, mask_value
from contextstore.processors.secrets import (
    SecretMasker,
    mask_block,
    mask_message,
    mask_tools,
)
from contextstore.processors.summarize import Summarizer, SummaryHook, SummaryRequest
from contextstore.processors.trimming import OutputTrimmer, truncate_middle

__all__ = [
    "PATTERNS",
    "Distiller",
    "Finding",
    "IndexedView",
    "MediaDegrader",
    "OutputTrimmer",
    "Pipeline",
    "PipelineReport",
    "Processor",
    "ProcessorStep",
    "SecretMasker",
    "SecretPattern",
    "Summarizer",
    "SummaryHook",
    "SummaryRequest",
    "default_pipeline",
    "distill_text",
    "drop_stale",
    "find_secrets",
    "is_stale",
    "mask_block",
    "mask_message",
    "mask_text",
    "mask_tools",
    "mask_value",
    "media_pointer",
    "readable_text",
    "truncate_middle",
]
