"""``contextstore serve --describe``: an OpenRPC 1.3 document of every served method.

Generated from the same pydantic models that validate the parameters, so a TypeScript (or
any) client can generate its types from it. Schemas are JSON Schema draft 7, as OpenRPC
expects: shared records live in ``components.schemas``; a record lists its read-only
properties (``truncated``, ``total_tokens``...) beside its fields, all of them present in
every result.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, get_type_hints

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from contextstore import __version__
from contextstore.core import errors
from contextstore.server.jsonrpc import error_code
from contextstore.server.methods import METHODS, Method, record_properties

OPENRPC_VERSION = "1.3.2"
REF_TEMPLATE = "#/components/schemas/{model}"

STORE_ERRORS: dict[str, tuple[type[errors.ContextStoreError], str]] = {
    "Unavailable": (
        errors.DatabaseUnavailableError,
        "The database cannot be reached (a PostgreSQL server down or dropping the "
        "connection, a file the server may not read); retry once it is back.",
    ),
    "InvalidInput": (
        errors.InvalidInputError,
        "The params were refused (a wrong type, value or size); nothing was written.",
    ),
    "NotFound": (
        errors.NotFoundError,
        "A conversation, checkpoint, request or rollback named in the params does not exist.",
    ),
    "Schema": (
        errors.SchemaError,
        "The database schema is not the one this version of contextstore expects.",
    ),
    "Integrity": (
        errors.IntegrityViolationError,
        "Stored rows break an invariant, or the database file is damaged.",
    ),
    "ReadOnly": (
        errors.ReadOnlyError,
        "A write was sent to a server started with --read-only; nothing was written.",
    ),
    "Busy": (
        errors.DatabaseBusyError,
        "Other writers kept the database or the conversation busy; retry the call.",
    ),
    "StorageFull": (
        errors.StorageFullError,
        "The disk or quota is full; nothing was written. Retry once space is freed.",
    ),
    "ReadOnlyLocation": (
        errors.ReadOnlyLocationError,
        "The database cannot be written where it is (a read-only file, directory or "
        "medium, a PostgreSQL standby, or a PostgreSQL role without the privileges a write "
        "needs); nothing was written.",
    ),
}
"""The error families a method can answer with, one per error code, each with what it
means for a client (``data.error_class`` names the exact class)."""


class RecordSchema(GenerateJsonSchema):
    """Pydantic's generator, with record properties added and every member required."""

    def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
        json_schema = super().dataclass_schema(schema)
        properties = json_schema.setdefault("properties", {})
        for name, prop in record_properties(schema["cls"]).items():
            returned = get_type_hints(prop.fget).get("return", Any)
            properties[name] = {
                **TypeAdapter(returned).json_schema(),
                "readOnly": True,
                "description": inspect.getdoc(prop) or name,
            }
        json_schema["required"] = list(properties)
        return json_schema

    def named_tuple_schema(self, schema: core_schema.NamedTupleSchema) -> JsonSchemaValue:
        """A named tuple (``ContextWindowInfo``) as the object the server sends for it (see
        :func:`~contextstore.server.methods.to_json`), not pydantic's array: its fields by
        name, every one present."""
        properties: dict[str, JsonSchemaValue] = {}
        for field in schema["fields"]:
            field_schema = self.generate_inner(field["schema"]).copy()
            field_schema.setdefault("title", self.get_title_from_name(field["name"]))
            properties[field["name"]] = field_schema
        return {
            "type": "object",
            "title": schema["cls"].__name__,
            "properties": properties,
            "required": list(properties),
        }


def to_draft7(schema: Any) -> Any:
    """Rewrite the draft 2020-12 keywords pydantic emits (``prefixItems``) as draft 7."""
    if isinstance(schema, list):
        return [to_draft7(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: to_draft7(value) for key, value in schema.items()}
    if "prefixItems" in converted:
        converted["items"] = converted.pop("prefixItems")
        converted["additionalItems"] = False
    return converted


def _schema(adapter_schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    components.update(to_draft7(adapter_schema.pop("$defs", {})))
    converted: dict[str, Any] = to_draft7(adapter_schema)
    return converted


def _method(method: Method, components: dict[str, Any]) -> dict[str, Any]:
    params_schema = _schema(
        method.params.model_json_schema(ref_template=REF_TEMPLATE, schema_generator=RecordSchema),
        components,
    )
    required = set(params_schema.get("required", []))
    params = []
    for name, schema in params_schema.get("properties", {}).items():
        schema = {key: value for key, value in schema.items() if key != "title"}
        params.append({"name": name, "required": name in required, "schema": schema})
    result = _schema(
        TypeAdapter(method.result).json_schema(
            ref_template=REF_TEMPLATE, schema_generator=RecordSchema, mode="serialization"
        ),
        components,
    )
    return {
        "name": method.name,
        "summary": method.summary,
        "description": method.doc,
        "paramStructure": "by-name",
        "params": params,
        "result": {"name": f"{method.name}_result", "schema": result},
        "errors": [{"$ref": f"#/components/errors/{name}"} for name in STORE_ERRORS],
    }


def describe(methods: Mapping[str, Method] = METHODS) -> dict[str, Any]:
    """The OpenRPC document of ``methods``."""
    components: dict[str, Any] = {}
    described = [_method(methods[name], components) for name in sorted(methods)]
    error_objects = {
        name: {
            "code": error_code(cls("")),
            "message": summary,
            "data": {"error_class": cls.__name__, "exit_code": cls.exit_code},
        }
        for name, (cls, summary) in STORE_ERRORS.items()
    }
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "contextstore",
            "version": __version__,
            "description": (
                "A durable history backend for LLM agents. Methods and parameter names are "
                "those of the Python ContextStore API; parameters go by name. A store error's "
                "data carries error_class, message and exit_code."
            ),
        },
        "methods": described,
        "components": {"schemas": components, "errors": error_objects},
    }
