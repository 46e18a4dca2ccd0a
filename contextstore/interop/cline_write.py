"""Writing Cline task files (export), atomically, from stored rows."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextstore.core.file_reads import ALL_PATHS, REPLACED_PATHS
from contextstore.core.validate import MAX_INT32
from contextstore.interop.cline import (
    USAGE_FIELDS,
    ClineEditType,
    ClineRequest,
    ClineTaskError,
    ClineUpdate,
    edit_type_for_kind,
    is_int,
    is_mention_metadata,
)


def update_from_row(row: Mapping[str, Any]) -> ClineUpdate:
    """A stored ``context_updates`` row as a Cline update (original ts and type if known)."""
    metadata = row.get("metadata") or {}
    stored_type: Any = metadata.get("cline_edit_type")
    edit_type = stored_type if is_int(stored_type, MAX_INT32) else edit_type_for_kind(row["kind"])
    stored_ts: Any = metadata.get("cline_ts")
    ts = stored_ts if is_int(stored_ts) else int(row["ts"])
    cline_metadata: list[Any] = []
    if REPLACED_PATHS in metadata and ALL_PATHS in metadata:
        cline_metadata = [list(metadata[REPLACED_PATHS]), list(metadata[ALL_PATHS])]
    elif isinstance(metadata.get("cline_metadata"), list):
        cline_metadata = copy.deepcopy(metadata["cline_metadata"])
    return ClineUpdate(
        row["message_idx"], row["block_idx"], edit_type, ts, row["text"], cline_metadata
    )


def context_history_value(updates: Sequence[ClineUpdate]) -> list[Any]:
    """Serialise updates as ``context_history.json`` (array of pairs, by message and block).

    A message's ``editType`` is that of its oldest update; in a file-mention entry an
    update without mention paths gets ``[[], []]`` so Cline can read it.
    """
    by_message: dict[int, dict[int, list[ClineUpdate]]] = {}
    for update in sorted(updates, key=lambda u: (u.message_idx, u.ts, u.block_idx)):
        by_message.setdefault(update.message_idx, {}).setdefault(update.block_idx, []).append(
            update
        )
    value: list[Any] = []
    for message_idx, blocks in by_message.items():
        edit_type = min((u for b in blocks.values() for u in b), key=lambda u: u.ts).edit_type
        entries = [
            [block_idx, [_update_value(u, edit_type) for u in items]]
            for block_idx, items in sorted(blocks.items())
        ]
        value.append([message_idx, [edit_type, entries]])
    return value


def _update_value(update: ClineUpdate, edit_type: int) -> list[Any]:
    metadata = update.metadata
    if edit_type == ClineEditType.FILE_MENTION and not is_mention_metadata(metadata):
        metadata = [[], []]
    return [update.ts, "text", [update.text], metadata]


def api_request_message(
    request: ClineRequest, deleted_range: tuple[int, int] | None
) -> dict[str, Any]:
    """An ``api_req_started`` UI message carrying a request's usage."""
    info: dict[str, Any] = {"request": "[exported by contextstore]"}
    for name, key in USAGE_FIELDS:
        value = getattr(request, name)
        if value is not None:
            info[key] = value
    if request.cost is not None:
        info["cost"] = request.cost
    if request.failure is not None:
        info["cancelReason"] = request.failure
    message: dict[str, Any] = {
        "ts": request.ts,
        "type": "say",
        "say": "api_req_started",
        "text": json.dumps(info, separators=(",", ":")),
    }
    if request.history_index is not None:
        message["conversationHistoryIndex"] = request.history_index
    if deleted_range is not None:
        message["conversationHistoryDeletedRange"] = list(deleted_range)
    if request.model_id is not None:
        message["modelInfo"] = {"modelId": request.model_id}
    return message


def write_json_atomic(path: Path, value: Any) -> None:
    """Write compact JSON (as Cline does) to a temporary file, then rename it over ``path``."""
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.tmp.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_task(
    out_dir: Path,
    files: Mapping[str, Any],
    *,
    overwrite: bool = False,
) -> list[Path]:
    """Write task files (name -> JSON value) into ``out_dir``, each atomically.

    Raises:
        ClineTaskError: a file exists and ``overwrite`` is False (nothing is written), or
            the directory cannot be created.
    """
    targets = [out_dir / name for name in files]
    existing = [p.name for p in targets if p.exists()]
    if existing and not overwrite:
        raise ClineTaskError(
            out_dir, None, f"already holds {', '.join(existing)}; pass overwrite to replace."
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ClineTaskError(out_dir, None, f"cannot be created ({exc.strerror}).") from exc
    for target, value in zip(targets, files.values(), strict=True):
        write_json_atomic(target, value)
    return targets
