"""Preparing requests: context management, the payload, and its later verification."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, insert, select, update

from contextstore.context_manager import (
    Summarizer,
    decide_and_write,
    explicit_truncate,
    policy_from_conversation,
)
from contextstore.core.errors import (
    IntegrityViolationError,
    InvalidInputError,
    PayloadMismatchError,
    RequestNotFoundError,
)
from contextstore.core.truncation import normalize_keep
from contextstore.core.validate import (
    canonical_json,
    check_id,
    check_int,
    check_text,
    payload_sha256,
)
from contextstore.core.view import build_view, pending_calls
from contextstore.facade.base import StoreBase
from contextstore.pipeline_runner import propose
from contextstore.processors.pipeline import Pipeline
from contextstore.records import (
    Conversation,
    PreparedRequest,
    TruncationDecision,
)
from contextstore.renderers import registry
from contextstore.storage import queries
from contextstore.storage.clock import last_ts, tick
from contextstore.storage.tables import (
    api_requests,
    conversations,
    request_options,
)


class RequestsMixin(StoreBase):
    """prepare_request, truncate, subagents and payload verification."""

    def create_subagent(
        self,
        parent_id: str,
        *,
        model_id: str | None = None,
        context_window: int | None = None,
        title: str | None = None,
    ) -> Conversation:
        """Create a subagent's conversation as a child of ``parent_id``.

        Its prepares follow Cline's SubagentRunner: compaction at 75 % of the window with
        the ``quarter`` strategy, no notices, and no truncation when it cannot progress.
        """
        check_id(parent_id)
        parent = self.get_conversation(parent_id)
        return self.create_conversation(
            model_id=model_id or parent.model_id,
            context_window=context_window or parent.context_window,
            title=title,
            metadata={"subagent": True},
            parent_id=parent_id,
        )

    def set_auto_condense(self, conversation_id: str, threshold: float | None) -> None:
        """Turn auto-condense on at ``threshold`` (a fraction of the window) or off (None).

        With auto-condense on, a prepare compacts once the previous request reaches
        ``min(floor(window * threshold), max allowed size)`` tokens, unless the last
        truncation left at most two messages (so a summary is never summarised).
        """
        check_id(conversation_id)
        policy_from_conversation(None, {}, threshold)

        def work(connection: Connection) -> None:
            conv = self._conversation(connection, conversation_id)
            meta = dict(conv.metadata)
            if threshold is None:
                meta.pop("auto_condense", None)
            else:
                meta["auto_condense"] = threshold
            connection.execute(
                update(conversations)
                .where(conversations.c.id == conversation_id)
                .values(metadata=meta)
            )

        self._db.write(work)

    def prepare_request(
        self,
        conversation_id: str,
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: str = "anthropic",
        model: str | None = None,
        max_tokens: int | None = None,
        auto_condense: float | None = None,
        summarizer: Summarizer | None = None,
        pipeline: Pipeline | None = None,
    ) -> PreparedRequest:
        """Decide on context management, persist the decision, and build the request.

        Call it before every model request. From the previous request's token total
        and the conversation's window it decides: nothing; file-read de-duplication alone
        (when that saves at least 30 %); or de-duplication, the truncation notice and a
        larger deleted range (``half``, or ``quarter`` after a jump to a smaller window).
        The decision, then a request row holding the payload's SHA-256, are written in one
        transaction. Record the provider's usage afterwards with
        ``record_request(conversation_id, request_id=ctx.request_id, ...)``. The processor
        pipeline (the store's, or ``pipeline``) runs on the resulting view and its rewrites
        are written as ``context_updates`` rows (kind ``processor``) in the same transaction.
        """
        check_id(conversation_id)
        registry.check_format(format)
        active = self.pipeline if pipeline is None else pipeline
        check_int("max_tokens", max_tokens, minimum=1)
        check_text("model", model, 200)
        options = self._request_options(format, system, tools, model, max_tokens)

        def work(connection: Connection) -> PreparedRequest:
            conv = self._conversation(connection, conversation_id)
            last_ts(connection, conversation_id, lock=True)
            policy = policy_from_conversation(conv.context_window, conv.metadata, auto_condense)
            state = queries.load_state(connection, conversation_id)
            decision = decide_and_write(
                connection, conversation_id, policy, state, summarizer=summarizer
            )
            if decision.action != "none":
                state = queries.refresh_decisions(connection, conversation_id, state)
            processed = propose(active, state)
            if processed:
                (stamp,) = tick(connection, conversation_id)
                queries.insert_updates(connection, conversation_id, stamp, processed)
                state = queries.with_updates(state, processed)
            view = build_view(state.messages, state.deleted_range, state.overlays)
            calls = pending_calls(view)
            if calls:
                raise InvalidInputError(
                    f"the last message calls tools {calls} whose results are not appended yet; "
                    "append a user message with their tool_result blocks, then prepare the "
                    "request."
                )
            payload = self._payload(view, options)
            problems = registry.validate_provider_payload(format, payload)
            if problems:
                raise IntegrityViolationError(
                    f"the {format} payload breaks the provider's rules "
                    f"({'; '.join(problems[:3])}); nothing was written. Run 'contextstore check'."
                )
            digest = self._store_options(connection, options)
            (stamp,) = tick(connection, conversation_id)
            request_id = connection.execute(
                insert(api_requests)
                .values(
                    conversation_id=conversation_id,
                    ts=stamp,
                    model_id=model or conv.model_id,
                    format=format,
                    options_sha256=digest,
                    payload_sha256=payload_sha256(payload),
                    message_count=len(view),
                )
                .returning(api_requests.c.id)
            ).scalar_one()
            return PreparedRequest(
                conversation_id=conversation_id,
                messages=registry.render("anthropic", view),
                deleted_range=state.deleted_range,
                decision=decision,
                format=format,
                payload=payload,
                request_id=int(request_id),
                ts=stamp,
            )

        return self._db.write(work)

    @staticmethod
    def _request_options(
        format: str,
        system: str | None,
        tools: Sequence[Mapping[str, Any]] | None,
        model: str | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        if system is not None and not isinstance(system, str):
            raise InvalidInputError("system must be a string.")
        if tools is not None and (
            isinstance(tools, str | bytes | Mapping)
            or not isinstance(tools, Sequence)
            or not all(isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in tools)
        ):
            raise InvalidInputError(
                "tools must be a list of tool definitions like {'name': ..., 'description': ..., "
                "'input_schema': {...}}."
            )
        options = {
            "format": format,
            "system": system,
            "tools": [dict(t) for t in tools] if tools is not None else None,
            "model": model,
            "max_tokens": max_tokens,
        }
        try:
            return dict(json.loads(canonical_json(options)))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"system and tools must be JSON-serialisable: {exc}.") from exc

    @staticmethod
    def _payload(view: list[dict[str, Any]], options: Mapping[str, Any]) -> dict[str, Any]:
        return registry.build_request(
            options["format"],
            view,
            system=options.get("system"),
            tools=options.get("tools"),
            model=options.get("model"),
            max_tokens=options.get("max_tokens"),
        )

    def request_payload(self, conversation_id: str, request_id: int) -> dict[str, Any]:
        """Rebuild a prepared request's exact payload from rows, verified against its hash.

        Raises:
            RequestNotFoundError: the request does not exist or was not prepared here.
            PayloadMismatchError: the rebuilt payload's hash differs from the stored one.
        """
        check_id(conversation_id)
        check_int("request_id", request_id, minimum=1, optional=False)
        with self._db.read() as connection:
            record = self._request(connection, conversation_id, request_id)
            row = connection.execute(
                select(request_options.c.data)
                .select_from(api_requests.join(request_options))
                .where(api_requests.c.id == request_id)
            ).first()
            if row is None or record.payload_sha256 is None:
                raise RequestNotFoundError(
                    f"request {request_id} was recorded without a prepared payload; only "
                    "requests from prepare_request can be rebuilt."
                )
            options = queries._json(row.data, f"options of request {request_id}")
            state = queries.load_state(connection, conversation_id, record.ts)
        view = build_view(state.messages, state.deleted_range, state.overlays)
        payload = self._payload(view, options)
        if payload_sha256(payload) != record.payload_sha256:
            raise PayloadMismatchError(
                f"request {request_id} rebuilt from rows does not match the payload hash stored "
                "when it was sent; rows it depends on were changed outside contextstore."
            )
        return payload

    def truncate(
        self,
        conversation_id: str,
        keep: str = "half",
        *,
        summary: str | None = None,
        summarizer: Summarizer | None = None,
        reason: str | None = None,
        first_user_replacement: bool = True,
    ) -> TruncationDecision:
        """Truncate now, for the explicit flows: ``none`` after a summary, ``last_two`` for a
        condense, ``quarter`` to retry after a provider's context-window error.

        Writes the new range, the truncation notice (carrying ``summary``, or what
        ``summarizer`` returns for the messages being hidden) and the first-user-message
        replacement, in one transaction. The original rows stay.
        """
        check_id(conversation_id)
        if summary is not None and not isinstance(summary, str):
            raise InvalidInputError("summary must be a string.")
        why = reason or f"explicit truncation (keep={keep})"
        if not isinstance(why, str):
            raise InvalidInputError("reason must be a string.")
        normalize_keep(keep)

        def work(connection: Connection) -> TruncationDecision:
            last_ts(connection, conversation_id, lock=True)
            return explicit_truncate(
                connection,
                conversation_id,
                keep,
                reason=why,
                summary=summary,
                summarizer=summarizer,
                first_user_replacement=first_user_replacement,
            )

        return self._db.write(work)
