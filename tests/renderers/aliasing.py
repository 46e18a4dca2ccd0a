"""Helpers to prove a renderer neither changes nor shares its caller's objects."""

from __future__ import annotations

from typing import Any


def containers(value: Any) -> list[int]:
    """Return the ids of every dict and list reachable from ``value``."""
    found: list[int] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(id(item))
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(id(item))
            stack.extend(item)
    return found


def shares_containers(output: Any, source: Any) -> bool:
    """True when ``output`` holds a dict or list object that ``source`` also holds."""
    return bool(set(containers(output)) & set(containers(source)))
