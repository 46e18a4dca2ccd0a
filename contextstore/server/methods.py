"""The JSON-RPC method table: one method per public :class:`ContextStore` method, and one per
pure function of the Python API (:data:`FUNCTIONS`).

The table is generated from the class, so a method added to the store is served without
touching this module: its parameters become a pydantic model (strict, unknown names refused)
built from the Python signature, and its result is the returned record as JSON, with the
Python field names (tuples become lists; read-only properties such as ``truncated`` are
included). A method whose Python signature is too loose for a wire contract gets a
signature written beside it (:data:`SIGNATURES`); a method that cannot cross a process
boundary is listed, with the reason, in :data:`EXCLUDED`. The pure functions
(``should_compact``, ``harden_history``...) are served the same way, by their own names and
parameter names, so that an agent in another language can use the store's arithmetic and
repairs on messages it holds itself; they read and write nothing.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, create_model
from pydantic_core import PydanticCustomError

from contextstore.core.errors import InvalidInputError
from contextstore.core.file_reads import optimize_file_reads
from contextstore.core.hardening import harden_history
from contextstore.core.records import AppendedMessage
from contextstore.core.truncation import next_truncation_range
from contextstore.core.view import ensure_tool_results_follow_tool_use, truncated_messages
from contextstore.core.window import context_window_info, should_compact
from contextstore.store import ContextStore

EXCLUDED: dict[str, str] = {
    # The server opens one store from --db at start and owns its lifetime.
    "open": "the server opens the store named by --db once, at start",
    "close": "the server closes the store when it stops",
    # A context manager held across calls; every JSON-RPC call is one transaction already.
    "transaction": "a Python context manager (each call is already one transaction)",
    "snapshot": "a Python context manager (each call already reads one moment)",
    # Arbitrary SQL stays local (the CLI's sql command); served clients use the typed audits.
    "query": "arbitrary read-only SQL is for local use ('contextstore sql'); use audit",
    # The importers' bulk path: rows are Python dataclasses, written by 'contextstore import'.
    "import_timeline": "an importer's bulk write of Python row objects (use 'contextstore import')",
    "discard_imported_rows": "an importer replacing its own rows (use 'contextstore import')",
    # Lineage walks take NodeRef values; served clients read lineage_edges or the table.
    "lineage": "takes a Python NodeRef; use lineage_edges, or the lineage table through audit",
    "add_lineage": "takes Python NodeRef values; a local caller's way to link its own rows",
    # Files on the server's machine, named by a client: run them where the files are.
    "backup": "writes a file on the server's machine (use 'contextstore backup')",
    "recover": "reads and writes files on the server's machine (use 'contextstore recover')",
}
"""Public store methods that are not served, and why."""

PYTHON_ONLY_PARAMETERS: dict[str, str] = {
    # Python callables and objects cannot travel as JSON; the store's defaults apply.
    "summarizer": "a Python callable (the hook that writes a summary)",
    "pipeline": "a Python object (the store's own pipeline applies)",
}
"""Parameters dropped from every RPC signature (the store's default is used)."""


def _append(
    conversation_id: str,
    role: str,
    content: str | list[dict[str, Any]],
    *,
    meta: dict[str, Any] | None = None,
    ts: int | None = None,
) -> AppendedMessage:
    """The one-message form of ``ContextStore.append``; ``append_many`` appends a list."""
    raise NotImplementedError  # a signature only: never called


SIGNATURES: dict[str, Callable[..., Any]] = {"append": _append}
"""Wire signatures written beside the Python ones that are overloaded or typed ``Any``."""

FUNCTIONS: dict[str, Callable[..., Any]] = {
    function.__name__: function
    for function in (
        context_window_info,
        should_compact,
        next_truncation_range,
        truncated_messages,
        ensure_tool_results_follow_tool_use,
        optimize_file_reads,
        harden_history,
    )
}
"""The pure functions of the Python API (importable from ``contextstore``), served by name:
they take messages (or Gemini contents) in the params and answer without the store."""


class InvalidParamsError(InvalidInputError):
    """The JSON-RPC params do not fit the method's signature; nothing was called."""

    def __init__(self, message: str, problems: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class Method:
    """One served method: its name, parameter model, result annotation and documentation."""

    name: str
    params: type[BaseModel]
    result: Any
    doc: str
    function: Callable[..., Any] | None = None
    """The pure function called (see :data:`FUNCTIONS`); None for a store method."""

    @property
    def summary(self) -> str:
        """The first line of the method's docstring."""
        return self.doc.strip().splitlines()[0] if self.doc.strip() else self.name

    def validate(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The keyword arguments for the store call, or :class:`InvalidParamsError`."""
        try:
            model = self.params.model_validate(params or {})
        except ValidationError as exc:
            problems = validation_problems(exc)
            accepted = ", ".join(self.params.model_fields) or "no parameters"
            details = "; ".join(f"{p['param']}: {p['message']}" for p in problems)
            raise InvalidParamsError(
                f"invalid params for {self.name}: {details} ({self.name} takes {accepted}).",
                problems,
            ) from None
        return {name: getattr(model, name) for name in model.model_fields_set}

    def call(self, store: ContextStore, params: Mapping[str, Any] | None) -> Any:
        """Validate ``params``, call the store (or the pure function), and return the result
        as JSON values."""
        arguments = self.validate(params)
        called = self.function if self.function is not None else getattr(store, self.name)
        return to_json(called(**arguments))


JSON_TERMS: dict[str, str] = {
    "dict_type": "input should be an object",
    "mapping_type": "input should be an object",
    "list_type": "input should be an array",
    "tuple_type": "input should be an array",
    "sequence_str": "input should be an array, not a string",
}
"""Pydantic's messages that name Python types, in the JSON terms a client sends."""

JSON_CLASSES = {"Sequence": "an array", "Mapping": "an object"}


def _json_message(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown parameter"
    if kind in JSON_TERMS:
        return JSON_TERMS[kind]
    if kind == "is_instance_of":
        expected = JSON_CLASSES.get(str((error.get("ctx") or {}).get("class")))
        if expected is not None:
            return f"input should be {expected}"
    message = str(error["msg"])
    if kind in ("too_long", "too_short"):  # "Tuple should have at most 2 items..."
        message = "the array " + message.split(" ", 1)[1].replace(" after validation", "")
    return message[:1].lower() + message[1:]


def validation_problems(exc: ValidationError) -> list[dict[str, str]]:
    """Each parameter a validation error is about, with what it should be in JSON terms
    (object, array; never a Python type name). An item of an array is named by its
    position (``item 0: input should be an object``); the alternatives of a union are
    joined with "or"."""
    by_param: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        location = error["loc"]
        param = str(location[0]) if location else "params"
        if error["type"] == "model_type":
            param, message = "params", "must be an object of named parameters"
        elif error["type"] == "string_unicode" and not location:
            # A name with a lone surrogate ("\ud800" in JSON): pydantic cannot even read it.
            param, message = "params", "a parameter name is not valid Unicode text"
        else:
            message = _json_message(error)
            # Past the name, a location holds array positions and (for a union) the
            # alternative's Python type, which means nothing on the wire.
            items = [part for part in location[1:] if isinstance(part, int)]
            if items:
                message = " ".join(f"item {i}" for i in items) + f": {message}"
        messages = by_param.setdefault(param, [])
        if message not in messages:
            messages.append(message)
    return [{"param": p, "message": " or ".join(m)} for p, m in by_param.items()]


EXACT_WHOLE_FLOAT = 2**53
"""The largest magnitude up to which every whole number is exact as a JSON number read as a
float (a double): ``9007199254740993.0`` reads as ``...992.0``."""


def whole_number(value: Any) -> Any:
    """A number with a zero fraction (``5.0``, ``1e3``) as the integer it is, as JSON Schema
    counts it; anything else as it came, for the strict integer check to refuse (``5.5``,
    ``"5"``, ``true``). A float beyond :data:`EXACT_WHOLE_FLOAT` may not be the number the
    client wrote, so it is refused here, saying how to send it."""
    if value.__class__ is float and value.is_integer():
        if abs(value) > EXACT_WHOLE_FLOAT:
            raise PydanticCustomError(
                "whole_float_inexact",
                "a number with a fraction or exponent is taken as an integer only up to "
                f"2**53 ({EXACT_WHOLE_FLOAT:,}), beyond which it may not be the number sent; "
                "write it in plain digits",
            )
        return int(value)
    return value


WholeNumber = Annotated[int, BeforeValidator(whole_number)]
"""An integer parameter on the wire: strict, but ``5.0`` is 5 (see :func:`whole_number`)."""


def array_as_tuple(value: Any) -> Any:
    """A JSON array as the tuple a parameter typed ``tuple[...]`` takes (a deleted range
    ``[2, 5]``); its items are still checked strictly."""
    return tuple(value) if value.__class__ is list else value


def wire_type(hint: Any) -> Any:
    """``hint`` with every ``int`` in it (``int | None``, ``str | int``, ``list[int]``)
    taking whole numbers written with a fraction or exponent (:data:`WholeNumber`), and
    every ``tuple`` a JSON array (:func:`array_as_tuple`); the JSON Schema published for it
    is unchanged (``integer`` already allows ``5.0``)."""
    if hint is int:
        return WholeNumber
    origin, args = get_origin(hint), get_args(hint)
    if not args or origin is Literal:
        return hint
    if origin is Annotated:
        inner = wire_type(args[0])
        metadata = (inner, *args[1:])
        return hint if inner is args[0] else Annotated[metadata]
    converted = tuple(wire_type(arg) for arg in args)
    if origin is tuple:
        return Annotated[tuple[converted], BeforeValidator(array_as_tuple)]  # type: ignore[valid-type]
    if converted == args:
        return hint
    if origin is Union or origin is types.UnionType:
        return Union[converted]  # noqa: UP007 (a union built from a tuple of types)
    return origin[converted]


def parameter_model(name: str, function: Callable[..., Any]) -> type[BaseModel]:
    """A strict pydantic model of ``function``'s parameters (``self`` and Python-only ones
    left out); JSON-RPC params are validated against it by name."""
    hints = get_type_hints(function)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == "self" or parameter.name in PYTHON_ONLY_PARAMETERS:
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"ContextStore.{name} takes *args/**kwargs; give it a SIGNATURES entry")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (wire_type(hints.get(parameter.name, Any)), default)
    config = ConfigDict(strict=True, extra="forbid", protected_namespaces=())
    model_name = "".join(part.title() for part in name.split("_")) + "Params"
    return create_model(model_name, __config__=config, **fields)


def _public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for name, value in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        if inspect.isfunction(value) or inspect.ismethod(value):
            found[name] = value
    return found


def public_method_names(cls: type = ContextStore) -> list[str]:
    """Every public method (and class method) of ``cls``, sorted."""
    return sorted(_public_methods(cls))


def build_table(cls: type = ContextStore) -> dict[str, Method]:
    """The served methods: every public method of ``cls`` not in :data:`EXCLUDED`, and the
    pure functions of :data:`FUNCTIONS`."""
    table = {}
    for name, function in sorted(_public_methods(cls).items()):
        if name in EXCLUDED:
            continue
        signature = SIGNATURES.get(name, function)
        result = get_type_hints(signature).get("return", Any)
        doc = inspect.getdoc(function) or ""
        table[name] = Method(name, parameter_model(name, signature), result, doc)
    for name, function in FUNCTIONS.items():
        if name in table:
            raise TypeError(f"{cls.__name__}.{name} and the pure function {name} share a name")
        result = get_type_hints(function).get("return", Any)
        doc = inspect.getdoc(function) or ""
        table[name] = Method(name, parameter_model(name, function), result, doc, function)
    return dict(sorted(table.items()))


METHODS: dict[str, Method] = build_table()
"""The method table every transport serves."""


def record_properties(cls: type) -> dict[str, property]:
    """The public read-only properties of a record class (``truncated``, ``total_tokens``)."""
    return {
        name: value
        for name, value in inspect.getmembers(cls)
        if isinstance(value, property) and not name.startswith("_")
    }


def to_json(value: Any) -> Any:
    """A store result as JSON values: records (dataclasses and named tuples) as objects with
    their Python field names and properties, other tuples as lists."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: to_json(item) for name, item in zip(value._fields, value, strict=True)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        encoded = {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in record_properties(type(value)):
            encoded[name] = to_json(getattr(value, name))
        return encoded
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    return value
