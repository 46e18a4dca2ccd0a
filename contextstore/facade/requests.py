"""Model requests: preparing them (context management and the payload), recording their
usage, and rebuilding a past payload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import (
    ContentTooLargeError,
    IntegrityViolationError,
    InvalidInputError,
    PayloadMismatchError,
    RequestNotFoundError,
)
from contextstore.core.nodes import PromptNode, prompt_nodes
from contextstore.core.overlays import BlockUpdate
from contextstore.core.planning import (
    Plan,
    TruncationSummarizer,
    plan_request,
    policy_from_conversation,
)
from contextstore.core.records import Conversation, PreparedRequest, RequestRecord
from contextstore.core.state import ConversationState
from contextstore.core.system_prompt import check_system
from contextstore.core.validate import (
    MAX_JSON_BYTES,
    MAX_NAME_LENGTH,
    MAX_TEXT_BYTES,
    TOOL_NAME,
    canonical_json,
    check_id,
    check_int,
    check_json_value,
    check_model_id,
    check_number,
    check_text,
    check_token_total,
    json_as_stored,
    payload_sha256,
    payload_sha256_of,
    text_bytes,
)
from contextstore.core.view import VIEW_RULES, build_view, pending_calls
from contextstore.core.window import context_window_info
from contextstore.facade.base import Snapshot, StoreBase, stored_view_rules
from contextstore.facade.collector import collector_paused
from contextstore.facade.prepare_memo import (
    PrepareMemo,
    RenderedPieces,
    held_at_least,
    read_state,
)
from contextstore.facade.processors import run_row
from contextstore.processors.pipeline import Pipeline
from contextstore.processors.runner import run, view_with
from contextstore.renderers import anthropic, registry
from contextstore.renderers.anthropic import RenderedMessage
from contextstore.renderers.anthropic_cache import MAX_CACHE_BREAKPOINTS, prompt_breakpoints
from contextstore.storage import history, nodes, processor_runs, requests, updates
from contextstore.storage.clock import NO_LIMIT, last_ts, tick
from contextstore.storage.database import Connection


@dataclass(frozen=True)
class _Prepared:
    """A request decided and built outside any transaction, waiting to be written."""

    plan: Plan
    processed: list[BlockUpdate]
    runs: list[dict[str, Any]]
    deleted_range: tuple[int, int] | None
    view: list[dict[str, Any]]
    payload: dict[str, Any]
    model_id: str | None
    context_window: int
    """The window the decision was made against (recorded in the request's options)."""
    sha256: str
    memo: PrepareMemo | None
    """What the next prepare may reuse (None inside a caller's transaction)."""

    @property
    def ticks(self) -> int:
        """Timestamps the write needs: the plan's, the processors', the request row's."""
        return int(self.plan.writes) + int(bool(self.processed)) + 1


class RequestsMixin(StoreBase):
    """Model requests: preparing them (context management and the payload), recording their
    usage, and rebuilding a past payload.
    """

    def prepare_request(
        self,
        conversation_id: str,
        *,
        system: str | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: str = "anthropic",
        model: str | None = None,
        max_tokens: int | None = None,
        auto_condense: float | None = None,
        summarizer: TruncationSummarizer | None = None,
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

        ``system`` is a string, or a list of Anthropic text blocks (``{"type": "text",
        "text": ..., "cache_control": ...}``): Anthropic gets the list as given, the other
        formats its texts joined by a blank line.
        """
        check_id(conversation_id)
        registry.check_format(format)
        active = self._active(pipeline)
        self._check_summarizer(summarizer)
        check_int("max_tokens", max_tokens, minimum=1)
        check_model_id("model", model)
        checked_system = self._masked_system(check_system(system), active)
        options = self._request_options(format, checked_system, tools, model, max_tokens)
        masked_tools = self._masked_tools(options["tools"], active)
        if masked_tools is not options["tools"]:
            options = self._request_options(format, checked_system, masked_tools, model, max_tokens)
        prompt = prompt_nodes(options["system"], options["tools"])
        # Inside a caller's transaction the rows read may yet be rolled back: nothing is kept.
        memoize = not self._db.in_transaction
        read: dict[str, Any] = {}

        def load(connection: Connection, conversation: Conversation) -> ConversationState:
            previous = self.prepare_cache.get(conversation_id)
            state, fingerprint, count = read_state(connection, conversation, previous)
            read.update(previous=previous, fingerprint=fingerprint, count=count)
            return state

        def decide(snapshot: Snapshot) -> _Prepared:
            conv = snapshot.conversation
            policy = policy_from_conversation(conv.context_window, conv.metadata, auto_condense)
            plan = self._masked_plan(
                plan_request(policy, snapshot.state, snapshot.total, summarizer=summarizer)
            )
            state = plan.applied(snapshot.state)
            with self._db.read() as connection:
                context = self._run_context(connection, conversation_id, active, NO_LIMIT)
            previous: PrepareMemo | None = read.get("previous")
            result = run(
                active, state, context, (previous.cut if previous else {}) if memoize else None
            )
            processed, view = result.proposals, result.view
            masked = self._masked_updates(processed)
            if masked is not None:  # the view sent is the one the stored rows rebuild
                processed, view = masked, view_with(state, masked)
            assert active is not None or not result.steps
            runs = [run_row(active, step) for step in result.steps] if active else []
            calls = pending_calls(view)
            if calls:
                raise InvalidInputError(
                    f"the last message calls tools {calls} whose results are not appended yet; "
                    "append a user message with their tool_result blocks, then prepare the "
                    "request."
                )
            built = None
            # A memo too large for the cache is not kept: its payload is built whole (one
            # pass, one hash), not as pieces for a next prepare.
            if (
                memoize
                and format == "anthropic"
                and held_at_least(snapshot.state) <= self.prepare_cache.max_bytes
            ):
                built = self._anthropic_payload(view, options, previous.pieces if previous else {})
            if built is None:
                payload = self._payload(view, options)
                problems = registry.validate_provider_payload(
                    format, payload, rules=options["view_rules"]
                )
                if problems:
                    raise IntegrityViolationError(
                        f"the {format} payload breaks the provider's rules "
                        f"({'; '.join(problems[:3])}); nothing was written. "
                        "Run 'contextstore check'."
                    )
                pieces: RenderedPieces = {}
                sha256, rendered = payload_sha256(payload), len(view)
            else:
                payload, sha256, pieces, rendered = built
            memo = None
            if memoize:
                memo = PrepareMemo(
                    snapshot.state,
                    read["fingerprint"],
                    result.cut_memo,
                    pieces,
                    read["count"],
                    rendered,
                )
            return _Prepared(
                plan,
                processed,
                runs,
                state.deleted_range,
                view,
                payload,
                model or conv.model_id,
                context_window_info(conv.context_window).context_window,
                sha256,
                memo,
            )

        def write(
            connection: Connection, prepared: _Prepared, stamps: list[int]
        ) -> tuple[int, int]:
            remaining = list(stamps)
            if prepared.plan.writes:
                self._write_plan(connection, conversation_id, prepared.plan, remaining.pop(0))
            runs_ts = remaining[-1]
            if prepared.processed:
                runs_ts = remaining.pop(0)
                updates.insert_updates(connection, conversation_id, runs_ts, prepared.processed)
            if prepared.runs:
                processor_runs.insert_runs(connection, conversation_id, runs_ts, prepared.runs)
            system_sha256, tools_sha256 = self._store_prompt_nodes(connection, prompt)
            request_id = requests.insert_request(
                connection,
                conversation_id,
                remaining[0],
                model_id=prepared.model_id,
                format=format,
                options_sha256=requests.store_options(
                    connection, {**options, "context_window": prepared.context_window}
                ),
                system_sha256=system_sha256,
                tools_sha256=tools_sha256,
                payload_sha256=prepared.sha256,
                message_count=len(prepared.view),
            )
            return request_id, remaining[0]

        with collector_paused():
            prepared, written = self._planned_write(
                conversation_id,
                decide,
                lambda p: p.ticks,
                write,
                load if memoize else None,
                local=summarizer is None and (active is None or active.local),
            )
        assert written is not None
        request_id, stamp = written
        if prepared.memo is not None:
            memo = dataclasses.replace(prepared.memo, request=(request_id, stamp))
            self.prepare_cache.put(conversation_id, memo, memo.size)
        payload = prepared.payload
        return PreparedRequest(
            conversation_id=conversation_id,
            messages=(
                payload["messages"]
                if format == "anthropic"
                else registry.render("anthropic", prepared.view)
            ),
            deleted_range=prepared.deleted_range,
            decision=prepared.plan.decision,
            format=format,
            payload=payload,
            request_id=request_id,
            ts=stamp,
        )

    def _store_prompt_nodes(
        self, connection: Connection, prompt: tuple[PromptNode | None, PromptNode | None]
    ) -> tuple[str | None, str | None]:
        """Keep the system prompt and tools as nodes (counted only when new); returns
        their hashes."""
        present = [node for node in prompt if node is not None]
        known = nodes.known_prompt_nodes(connection, [node.sha256 for node in present])
        new = list({n.sha256: n for n in reversed(present) if n.sha256 not in known}.values())
        nodes.insert_prompt_nodes(
            connection, [(node, self.token_counter.count(node.content)) for node in new]
        )
        system, tools = prompt
        return (
            None if system is None else system.sha256,
            None if tools is None else tools.sha256,
        )

    @staticmethod
    def _request_options(
        format: str,
        system: str | Sequence[Mapping[str, Any]] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        model: str | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        system = check_system(system)
        if tools is not None and (
            isinstance(tools, str | bytes | Mapping)
            or not isinstance(tools, Sequence)
            or not all(isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in tools)
        ):
            raise InvalidInputError(
                "tools must be a list of tool definitions like {'name': ..., 'description': ..., "
                "'input_schema': {...}}."
            )
        tool_list = None
        if tools is not None:
            tool_list = [dict(t) for t in tools]
            check_json_value("tools", tool_list)
            _check_tool_definitions(tool_list, format)
        _check_breakpoints(system, tool_list, format)
        options = {
            "format": format,
            "system": system,
            "tools": tool_list,
            "model": model,
            "max_tokens": max_tokens,
            "view_rules": VIEW_RULES,
        }
        encoded = canonical_json(options)
        size = text_bytes("tools", encoded)
        if size > MAX_TEXT_BYTES + MAX_JSON_BYTES:
            raise ContentTooLargeError(
                f"the system prompt and tools are {size:,} bytes as JSON, over the limit of "
                f"{MAX_TEXT_BYTES + MAX_JSON_BYTES:,} (MAX_TEXT_BYTES + MAX_JSON_BYTES); "
                "shorten the tool definitions."
            )
        # Built as it will be stored, so the payload rebuilt from the row hashes the same.
        return dict(json_as_stored(encoded))

    @staticmethod
    def _payload(view: list[dict[str, Any]], options: Mapping[str, Any]) -> dict[str, Any]:
        return registry.build_request(
            options["format"],
            view,
            system=options.get("system"),
            tools=options.get("tools"),
            model=options.get("model"),
            max_tokens=options.get("max_tokens"),
            rules=options.get("view_rules", 1),
        )

    @staticmethod
    def _anthropic_payload(
        view: list[dict[str, Any]],
        options: Mapping[str, Any],
        previous: RenderedPieces,
    ) -> tuple[dict[str, Any], str, RenderedPieces, int] | None:
        """The Anthropic payload of ``view``, its hash, the rendered messages and how many
        were rendered anew, reusing ``previous`` renderings of the same message objects;
        None when the view is not one the messages rendered one by one describe (a message
        left empty, roles not alternating, more cache breakpoints than the API takes, a
        provider rule broken): then it is built whole.
        The payload's messages are copies, so the caller may change them."""
        rules = options.get("view_rules", 1)
        pieces: RenderedPieces = {}
        rendered: list[RenderedMessage] = []
        fresh = 0
        for message in view:
            found = previous.get(id(message))
            if found is not None and found[0] is message:
                piece = found[1]
            else:
                made = anthropic.render_message(message, rules)
                if made is None:
                    return None
                piece, fresh = made, fresh + 1
                found = (message, piece)
            pieces[id(message)] = found
            rendered.append(piece)
        # The pieces kept are renderings of a message anywhere in the list; the last one
        # is sent as the last message is (a final assistant message loses trailing
        # whitespace).
        if rendered:
            rendered[-1] = anthropic.as_final(rendered[-1], rules)
        budget = MAX_CACHE_BREAKPOINTS - prompt_breakpoints(
            options.get("system"), options.get("tools")
        )
        if not anthropic.conforming(rendered, budget):
            return None
        handed = [piece.copy() for piece in rendered]
        body = registry.build_request(
            "anthropic",
            [],
            system=options.get("system"),
            tools=options.get("tools"),
            model=options.get("model"),
            max_tokens=options.get("max_tokens"),
        )
        del body["messages"]
        sha256 = payload_sha256_of(body, "messages", [piece.canonical for piece in rendered])
        body["messages"] = handed
        return body, sha256, pieces, fresh

    def record_request(
        self,
        conversation_id: str,
        *,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cache_writes: int | None = None,
        cache_reads: int | None = None,
        cost: float | None = None,
        model_id: str | None = None,
        request_id: int | None = None,
        failure: str | None = None,
        ts: int | None = None,
    ) -> RequestRecord:
        """Record a model request's token usage and cost, or why it failed.

        With ``request_id`` (from :meth:`prepare_request`), the usage is stored on that
        prepared request's row; otherwise a new request row is written. The next
        :meth:`prepare_request` decides on truncation from the previous request's usage.
        ``failure`` says why a request failed or was cancelled (for example
        ``"context_window_exceeded"`` before ``truncate(keep="quarter")`` and a retry, or
        Cline's ``"user_cancelled"``), so audits can find them. ``ts`` stamps a new row
        with a timestamp of the caller's (an importer replaying another tool's clock); it
        must be later than the conversation's last ``ts``, and cannot be combined with
        ``request_id`` (a prepared request keeps its own ``ts``).
        """
        check_id(conversation_id)
        counts = {
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cache_writes": cache_writes,
            "cache_reads": cache_reads,
        }
        for name, value in counts.items():
            check_int(name, value)
        check_token_total(counts)
        check_number("cost", cost)
        check_model_id("model_id", model_id)
        check_int("request_id", request_id, minimum=1)
        check_text("failure", failure, MAX_NAME_LENGTH)
        if ts is not None and request_id is not None:
            raise InvalidInputError(
                "ts applies to a new request row; a prepared request (request_id) keeps the "
                "ts it was prepared at."
            )
        usage = {
            "failure": failure,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cache_writes": cache_writes,
            "cache_reads": cache_reads,
            "cost": cost,
        }

        def work(connection: Connection) -> RequestRecord:
            if request_id is None:
                (stamp,) = tick(connection, conversation_id, at=ts)
                new_id = requests.insert_request(
                    connection, conversation_id, stamp, model_id=model_id, **usage
                )
                return self._request(connection, conversation_id, new_id)
            last_ts(connection, conversation_id, lock=True)
            recorded = self._request(connection, conversation_id, request_id)
            values: dict[str, Any] = {k: v for k, v in usage.items() if v is not None}
            # Counts given earlier for this request stay; the total is over both calls.
            check_token_total({**dataclasses.asdict(recorded), **values})
            if model_id is not None:
                values["model_id"] = model_id
            requests.set_usage(connection, request_id, values)
            return self._request(connection, conversation_id, request_id)

        return self._db.write(work)

    def requests(self, conversation_id: str, *, as_of: int | None = None) -> list[RequestRecord]:
        """The conversation's API requests, oldest first."""
        check_id(conversation_id)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            return requests.list_requests(connection, conversation_id, limit)

    def request_payload(self, conversation_id: str, request_id: int) -> dict[str, Any]:
        """Rebuild a prepared request's exact payload from rows, verified against its hash.

        Raises:
            RequestNotFoundError: the request does not exist or was not prepared here.
            PayloadMismatchError: the rebuilt payload's hash differs from the stored one.
        """
        check_id(conversation_id)
        check_int("request_id", request_id, minimum=1, optional=False)
        with collector_paused():
            return self._rebuilt_payload(conversation_id, request_id)

    def _rebuilt_payload(self, conversation_id: str, request_id: int) -> dict[str, Any]:
        with self._db.read() as connection:
            record = self._request(connection, conversation_id, request_id)
            options = requests.load_options(connection, request_id)
            if options is None or record.payload_sha256 is None:
                raise RequestNotFoundError(
                    f"request {request_id} was recorded without a prepared payload; only "
                    "requests from prepare_request can be rebuilt."
                )
            state = history.load_state(connection, conversation_id, record.ts)
        rules = stored_view_rules(options, request_id)
        view = build_view(state.messages, state.deleted_range, state.overlays, rules=rules)
        payload = self._payload(view, options)
        if payload_sha256(payload) != record.payload_sha256:
            raise PayloadMismatchError(
                f"request {request_id} rebuilt from rows does not match the payload hash stored "
                "when it was sent; rows it depends on were changed outside contextstore."
            )
        return payload


def _check_tool_definitions(tools: list[dict[str, Any]], format: str) -> None:
    """Refuse tools a provider would reject the request for: a name outside
    :data:`TOOL_NAME`, a name given twice, and (Anthropic) a custom tool without an
    ``input_schema`` object. Checked when a request is prepared; a stored request is rebuilt
    as it was sent.

    Raises:
        InvalidInputError: naming the tool by its position.
    """
    seen: dict[str, int] = {}
    for position, tool in enumerate(tools):
        name = tool["name"]
        if not TOOL_NAME.fullmatch(name):
            raise InvalidInputError(
                f"tools[{position}].name {name!r} is not a name the providers accept: 1 to 64 "
                "letters, digits, '_' or '-'."
            )
        if name in seen:
            raise InvalidInputError(
                f"tools[{position}].name {name!r} is already the name of tools[{seen[name]}]; "
                "tool names must be unique."
            )
        seen[name] = position
        schema = tool.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise InvalidInputError(
                f"tools[{position}].input_schema must be a JSON Schema object, got "
                f"{type(schema).__name__}."
            )
        custom = tool.get("type") in (None, "custom")
        if format == "anthropic" and custom and schema is None:
            raise InvalidInputError(
                f"tools[{position}] ({name!r}) has no input_schema; Anthropic needs one for a "
                "tool of your own, such as {'type': 'object', 'properties': {}}."
            )


def _check_breakpoints(system: Any, tools: list[dict[str, Any]] | None, format: str) -> None:
    """Refuse (Anthropic) a system prompt and tools holding more than
    :data:`MAX_CACHE_BREAKPOINTS` blocks with a ``cache_control``: the API refuses such a
    request whatever the messages, which keep only the breakpoints left room for.

    Raises:
        InvalidInputError: saying how many there are.
    """
    found = prompt_breakpoints(system, tools)
    if format == "anthropic" and found > MAX_CACHE_BREAKPOINTS:
        raise InvalidInputError(
            f"the system prompt and tools hold {found} blocks with cache_control, and Anthropic "
            f"takes at most {MAX_CACHE_BREAKPOINTS} in a request; remove cache_control from "
            f"{found - MAX_CACHE_BREAKPOINTS} of them."
        )
