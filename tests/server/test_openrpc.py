"""``serve --describe``: an OpenRPC document of every method, generated from the models that
validate the parameters, valid against the OpenRPC meta-schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest
from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from contextstore.server.methods import METHODS, InvalidParamsError
from contextstore.server.openrpc import describe


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The document as the command prints it."""
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", "serve", "--describe"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


# The structure OpenRPC 1.3 requires (https://spec.open-rpc.org), as a JSON Schema.
CONTENT_DESCRIPTOR = {
    "type": "object",
    "required": ["name", "schema"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "required": {"type": "boolean"},
        "schema": {"type": ["object", "boolean"]},
    },
}
REFERENCE = {"type": "object", "required": ["$ref"], "properties": {"$ref": {"type": "string"}}}
ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
}
OPENRPC_STRUCTURE = {
    "type": "object",
    "required": ["openrpc", "info", "methods"],
    "properties": {
        "openrpc": {"type": "string", "pattern": r"^1\.[0-3]\.\d+$"},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "properties": {"title": {"type": "string"}, "version": {"type": "string"}},
        },
        "methods": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "params", "result"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z_]+$"},
                    "paramStructure": {"enum": ["by-name", "by-position", "either"]},
                    "params": {"type": "array", "items": CONTENT_DESCRIPTOR},
                    "result": CONTENT_DESCRIPTOR,
                    "errors": {"type": "array", "items": {"anyOf": [ERROR, REFERENCE]}},
                },
            },
        },
        "components": {
            "type": "object",
            "properties": {
                "schemas": {"type": "object", "additionalProperties": {"type": "object"}},
                "errors": {"type": "object", "additionalProperties": ERROR},
            },
        },
    },
}


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [value["$ref"]] if isinstance(value.get("$ref"), str) else []
        return own + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_the_document_has_the_structure_openrpc_requires(document: dict[str, Any]) -> None:
    Draft7Validator(OPENRPC_STRUCTURE).validate(document)
    names = [m["name"] for m in document["methods"]]
    assert names == sorted(METHODS) and len(set(names)) == len(names)
    for ref in _refs(document):
        _resolve(document, ref)  # every reference points inside the document


def test_every_schema_in_it_is_valid_json_schema_draft_7(document: dict[str, Any]) -> None:
    schemas = [d["schema"] for m in document["methods"] for d in [*m["params"], m["result"]]]
    schemas += list(document["components"]["schemas"].values())
    for schema in schemas:
        Draft7Validator.check_schema(schema)
    assert not any("prefixItems" in json.dumps(s) or "$defs" in json.dumps(s) for s in schemas)


def test_the_params_are_the_validating_models(document: dict[str, Any]) -> None:
    for method in document["methods"]:
        model = METHODS[method["name"]].params
        assert [p["name"] for p in method["params"]] == list(model.model_fields)
        required = {p["name"] for p in method["params"] if p["required"]}
        assert required == {n for n, f in model.model_fields.items() if f.is_required()}
        assert method["paramStructure"] == "by-name"


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft7Validator:
    resource = Resource.from_contents(document, default_specification=DRAFT7)
    return Draft7Validator(schema, registry=Registry().with_resource("urn:doc", resource))


def test_a_real_answer_validates_against_its_result_schema(document: dict[str, Any]) -> None:
    """The described result of prepare_request accepts what the server returns."""
    from contextstore import ContextStore
    from contextstore.server.methods import to_json

    with ContextStore.open(":memory:") as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hello")
        prepared = to_json(store.prepare_request(cid, system="S"))
        checkpoints = to_json(store.checkpoints(cid))
    by_name = {m["name"]: m for m in document["methods"]}
    components = document["components"]["schemas"]
    for name, answer in (("prepare_request", prepared), ("checkpoints", checkpoints)):
        schema = json.loads(
            json.dumps(by_name[name]["result"]["schema"]).replace(
                '"#/components/schemas/', '"urn:doc#/components/schemas/'
            )
        )
        _validator(document, schema).validate(answer)
        assert components  # records are shared, not repeated
    assert "truncated" in by_name["prepare_request"]["result"]["schema"]["properties"]


def test_the_pure_functions_answers_validate_against_their_result_schemas(
    document: dict[str, Any],
) -> None:
    """A named tuple is described as the object the server sends, not pydantic's array."""
    from contextstore.server.methods import FUNCTIONS, to_json

    read = [
        {"role": "user", "content": "<task>t</task>"},
        {"role": "assistant", "content": "ok"},
    ]
    answers = {
        "context_window_info": to_json(FUNCTIONS["context_window_info"](8192)),
        "next_truncation_range": to_json(FUNCTIONS["next_truncation_range"](read, None, "half")),
        "optimize_file_reads": to_json(FUNCTIONS["optimize_file_reads"](read)),
        "should_compact": to_json(FUNCTIONS["should_compact"](10, None)),
    }
    by_name = {m["name"]: m for m in document["methods"]}
    for name, answer in answers.items():
        schema = json.loads(
            json.dumps(by_name[name]["result"]["schema"]).replace(
                '"#/components/schemas/', '"urn:doc#/components/schemas/'
            )
        )
        _validator(document, schema).validate(answer)
    window = by_name["context_window_info"]["result"]["schema"]
    assert window["type"] == "object"
    assert window["required"] == ["context_window", "max_allowed_size"]
    assert not _validator(document, window).is_valid([8192, 6553.6])


def test_a_param_schema_refuses_what_the_model_refuses(document: dict[str, Any]) -> None:
    append = next(m for m in document["methods"] if m["name"] == "append")
    role = next(p for p in append["params"] if p["name"] == "role")
    assert Draft7Validator(role["schema"]).is_valid("user")
    assert not Draft7Validator(role["schema"]).is_valid(7)
    with pytest.raises(InvalidParamsError):
        METHODS["append"].validate({"conversation_id": "c", "role": 7, "content": "x"})


def _allows_integers(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "integer" or any(
        _allows_integers(option) for option in schema.get("anyOf", [])
    )


NUMBERS = [5, 5.0, 1e3, -0.0, 5.5, True, "5", None, [5]]


def test_integer_param_schemas_and_the_models_agree_on_what_is_an_integer(
    document: dict[str, Any],
) -> None:
    """JSON Schema's ``integer`` takes 5.0; so does every integer param (5.5, true and
    "5" neither); an integer in a union or optional is no different."""
    checked = 0
    for method in document["methods"]:
        for param in method["params"]:
            if not _allows_integers(param["schema"]):
                continue
            checked += 1
            for value in NUMBERS:
                by_schema = Draft7Validator(param["schema"]).is_valid(value)
                try:
                    METHODS[method["name"]].validate({param["name"]: value})
                    by_model = True
                except InvalidParamsError as exc:
                    by_model = param["name"] not in {p["param"] for p in exc.problems}
                assert by_model == by_schema, (method["name"], param["name"], value)
    assert checked > 30


def _official_meta_schemas() -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The OpenRPC project's meta-schema (npm ``@open-rpc/meta-schema``) and the JSON Schema
    meta-schema it refers to (``@json-schema-tools/meta-schema``), when installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return None
    root = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, check=False)
    script = (
        "process.stdout.write(JSON.stringify(["
        "require('@open-rpc/meta-schema').default,"
        "require('@json-schema-tools/meta-schema').default]))"
    )
    done = subprocess.run(
        [node, "-e", script],
        capture_output=True,
        text=True,
        check=False,
        env={"NODE_PATH": root.stdout.strip(), "PATH": ""},
    )
    if done.returncode != 0:
        return None
    openrpc, json_schema = json.loads(done.stdout)
    return openrpc, json_schema


def test_the_document_validates_against_the_official_openrpc_meta_schema(
    document: dict[str, Any],
) -> None:
    schemas = _official_meta_schemas()
    if schemas is None:
        pytest.skip(
            "the official meta-schema is not installed: npm install -g "
            "@open-rpc/meta-schema@1.14.9 @json-schema-tools/meta-schema@1.8.0 (.ci/run does)"
        )
    openrpc, json_schema = schemas
    meta = Resource.from_contents(json_schema, default_specification=DRAFT7)
    registry = Registry().with_resources(
        [("https://meta.json-schema.tools", meta), ("https://meta.json-schema.tools/", meta)]
    )
    validator = Draft7Validator(openrpc, registry=registry)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]
    broken = dict(document, methods=[{"name": "x"}])
    assert not validator.is_valid(broken)  # the meta-schema does check what it is given


def test_describe_needs_no_store_and_matches_the_library(document: dict[str, Any]) -> None:
    assert document == json.loads(json.dumps(describe()))


def _subclasses(cls: type) -> list[type]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in _subclasses(direct))]


def test_every_error_code_a_method_can_answer_with_is_described() -> None:
    """The document listed six error families: -32001 (the database cannot be reached),
    -32008 (storage full) and -32009 (read-only location) were missing, so a client
    generating its types from it knew nothing of them; ReadOnly's message stopped
    mid-sentence (the first line of a docstring) and named read_only=True."""
    from contextstore.core.errors import ContextStoreError
    from contextstore.server.jsonrpc import error_code

    described = describe()["components"]["errors"]
    codes = {error["code"] for error in described.values()}
    for cls in _subclasses(ContextStoreError)[1:]:
        if cls.__module__ == "contextstore.core.errors":
            assert error_code(cls("")) in codes, cls.__name__
    for error in described.values():
        assert error["message"].endswith("."), error
        assert "``" not in error["message"] and "read_only=" not in error["message"]
