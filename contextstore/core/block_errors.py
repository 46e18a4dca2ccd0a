"""Plain words for what the block models refuse: which block, which field, what it must be.

pydantic's own messages ("Input should be a valid string", "Field required") name union
members and error types a caller never wrote; :func:`describe` follows an error's location
through the models to the field, as a path inside the block (``source.media_type``,
``citations[0].type``), and says what that field must hold and what it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from contextstore.core.block_kinds import BLOCK_MODELS
from contextstore.core.block_models import CacheControl, CitationsConfig
from contextstore.core.validate import shown


def describe(errors: list[ErrorDetails], block: dict[str, Any], position: str, kind: str) -> str:
    """Plain words for what the content model found wrong with a block: which field (its
    path in the block), what it must be, and what it holds; in the library's terms, never
    pydantic's (its messages, error types and union labels are not shown)."""
    # loc[0] is the block's type; the first error that reaches its field is the one to tell.
    found = [_field_at(BLOCK_MODELS[kind], error["loc"][1:], block) for error in errors]
    chosen = next((n for n, (_, _, whole) in enumerate(found) if whole), 0)
    error = errors[chosen]
    annotation, path, _ = found[chosen]
    where = f"{position} ({kind})"
    field = f"{where}: {path}" if path else where
    problem = error["type"]
    if problem == "extra_forbidden":
        allowed = _choices(list(_bare(annotation).model_fields), "and")
        return (
            f"{where}: {path} has the field {shown(error['loc'][-1])}, which the provider "
            f"refuses there; {path} holds only {allowed}."
        )
    if problem == "string_unicode":  # a lone surrogate ("\ud800"), in a value or a key
        what = f"{field}" if path else f"{where} has a field name that"
        return f"{what} is not valid Unicode text (a lone surrogate); pass well-formed text."
    if problem == "missing":
        return f"{where} has no {path}; set it to {_expected(annotation)}."
    if problem == "string_too_short":
        return f"{field} must not be empty; set it to the {path} the provider gave."
    if problem in ("union_tag_invalid", "union_tag_not_found"):
        tags = _tags(annotation)
        got = error.get("ctx", {}).get("tag")
        got_text = f", got {shown(got)}" if problem == "union_tag_invalid" else ", and it has none"
        return f"{field} must have a 'type' of {_choices(tags)}{got_text}."
    return f"{field} must be {_expected(annotation)}, got {shown(error['input'])}."


def _field_at(
    model: type[BaseModel], loc: Sequence[int | str], value: Any
) -> tuple[Any, str, bool]:
    """The annotation of the value that an error's location (inside ``value``, a block of
    ``model``) names, and its path in the block: ``source.media_type``, ``citations[0].type``.

    pydantic's location also names the member of a union it tried (a type value, or a label
    such as ``str``): a type value picks its member, and a label is followed when the value
    is of that member's kind alone (a list for ``str | list[...]``); otherwise the location
    stops at the union, as the value is none of its members.
    """
    annotation: Any = model
    path = ""
    for part in loc:
        annotation = _bare(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:  # a field the model does not define
                return annotation, path, True
            path = f"{path}.{part}" if path else str(part)
            annotation = field.annotation
            value = value.get(part) if isinstance(value, dict) else None
        elif get_origin(annotation) is list and isinstance(part, int):
            path = f"{path}[{part}]"
            annotation = get_args(annotation)[0]
            value = value[part] if isinstance(value, list) and part < len(value) else None
        elif _is_union(annotation) and part in _tags(annotation):
            annotation = next(m for m in _members(annotation) if part in _tags(m))
        elif _is_union(annotation):
            kinds = [m for m in _members(annotation) if _of_kind(value, m, str(part))]
            if len(kinds) != 1:
                return annotation, path, False
            annotation = kinds[0]
        else:
            return annotation, path, False
    return annotation, path, True


def _of_kind(value: Any, annotation: Any, label: str) -> bool:
    """``value`` is of the kind ``annotation`` (a member of a union) takes, and ``label``
    (from an error's location) names that member: a list for ``list[...]``, a dict for a
    model, a string for ``str``."""
    origin = get_origin(annotation) or annotation
    if not isinstance(origin, type):
        return False
    named = label == origin.__name__ or label.startswith(f"{origin.__name__}[")
    if issubclass(origin, BaseModel):
        origin = dict
    return named and isinstance(value, origin)


def _bare(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` and without ``| None`` when it has one other
    member (pydantic adds no step to the location for them)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    members = _members(annotation) if _is_union(annotation) else []
    if len(members) == 1 and type(None) in get_args(annotation):
        return _bare(members[0])
    return annotation


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, UnionType)


def _members(annotation: Any) -> list[Any]:
    """The members of a union other than None, each without ``Annotated``."""
    annotation = annotation if _is_union(annotation) else _bare(annotation)
    return [_bare(m) for m in get_args(annotation) if m is not type(None)]


def _tags(annotation: Any) -> list[str]:
    """The ``type`` values a model, or a union of models, accepts (empty for other types)."""
    annotation = _bare(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get("type")
        return list(get_args(field.annotation)) if field is not None else []
    if _is_union(annotation):
        return [tag for member in _members(annotation) for tag in _tags(member)]
    return []


_WORDS: dict[Any, str] = {
    str: "a string",
    bool: "True or False",
    int: "an integer",
    type(None): "None",
    CacheControl: "{'type': 'ephemeral'} (with an optional 'ttl' of '5m' or '1h')",
    CitationsConfig: "{'enabled': True} or {'enabled': False}",
}


def _expected(annotation: Any) -> str:
    """What a value of ``annotation`` is, in words."""
    nullable = _is_union(annotation) and type(None) in get_args(annotation)
    annotation = _bare(annotation)
    words = _WORDS.get(annotation) if isinstance(annotation, type) else None
    if words is None:
        tags = _tags(annotation)
        if tags:
            words = f"an object with a 'type' of {_choices(tags)}"
        elif get_origin(annotation) is Literal:
            words = _choices(list(get_args(annotation)))
        elif get_origin(annotation) is list:
            item = _bare(get_args(annotation)[0])
            tags = _tags(item)
            items = f"objects with a 'type' of {_choices(tags)}" if tags else "content blocks"
            words = f"a list of {items}"
        elif get_origin(annotation) is dict:
            words = "an object (a dict with string keys)"
        elif _is_union(annotation):
            words = " or ".join(_expected(member) for member in _members(annotation))
        else:
            words = "a value of another type"
    return f"{words}, or None" if nullable else words


def _choices(values: Sequence[Any], word: str = "or") -> str:
    """``'a', 'b' or 'c'`` (``word``: ``"and"`` for ``'a', 'b' and 'c'``)."""
    shown_values = [repr(value) for value in values]
    if len(shown_values) < 2:
        return "".join(shown_values)
    return f"{', '.join(shown_values[:-1])} {word} {shown_values[-1]}"
