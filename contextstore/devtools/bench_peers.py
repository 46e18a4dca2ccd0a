"""The same append-and-read workload on peer stores, when they are installed.

Peers are optional (``pip install "contextstore[bench]"``): each adapter returns None with
the reason when its package is missing. Nothing reaches the network: the OpenAI Agents
SDK's ``SQLiteSession`` and LangGraph's ``SqliteSaver`` store and read locally, and the
LangGraph graph is a single node that needs no model.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextstore.processors.pipeline import Pipeline
from contextstore.store import ContextStore


@dataclass(frozen=True)
class PeerRun:
    """One store's run of the workload: time to append, time to read back, file size."""

    name: str
    append_s: float
    read_s: float
    file_bytes: int
    messages_read: int
    note: str


def _body(i: int, size: int) -> str:
    return (f"message {i} " + "lorem ipsum " * (size // 12 + 1))[:size]


def contextstore_run(folder: Path, messages: int, size: int) -> PeerRun:
    """contextstore: one append per message, then a full render."""
    path = folder / "contextstore.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation()
        start = time.perf_counter()
        for i in range(messages):
            role = "user" if i % 2 == 0 else "assistant"
            store.append(conv.id, role, _body(i, size))
        appended = time.perf_counter() - start
        start = time.perf_counter()
        view = store.render(conv.id)
        read = time.perf_counter() - start
    return PeerRun(
        "contextstore",
        appended,
        read,
        _size(path),
        len(view),
        "WAL, synchronous=FULL, one transaction per message",
    )


def openai_agents_run(folder: Path, messages: int, size: int) -> PeerRun | str:
    """OpenAI Agents SDK ``SQLiteSession``: ``add_items`` per message, ``get_items``."""
    try:
        from agents import SQLiteSession
    except ImportError:
        return "openai-agents is not installed"
    path = folder / "openai_agents.db"

    async def work() -> tuple[float, float, int]:
        session = SQLiteSession("bench", str(path))
        start = time.perf_counter()
        for i in range(messages):
            role = "user" if i % 2 == 0 else "assistant"
            await session.add_items([{"role": role, "content": _body(i, size)}])
        appended = time.perf_counter() - start
        start = time.perf_counter()
        items = await session.get_items()
        read = time.perf_counter() - start
        session.close()
        return appended, read, len(items)

    appended, read, count = asyncio.run(work())
    return PeerRun(
        "openai-agents SQLiteSession",
        appended,
        read,
        _size(path),
        count,
        "one JSON row per item; no blocks, no tokens, no rollback",
    )


def langgraph_run(folder: Path, messages: int, size: int) -> PeerRun | str:
    """LangGraph ``SqliteSaver``: one graph step per user/assistant pair."""
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
    except ImportError:
        return "langgraph and langgraph-checkpoint-sqlite are not installed"
    path = folder / "langgraph.db"
    connection = sqlite3.connect(path, check_same_thread=False)
    counter = iter(range(1, messages, 2))

    def reply(_state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(_body(next(counter), size))]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    app = graph.compile(checkpointer=SqliteSaver(connection))
    config: Any = {"configurable": {"thread_id": "bench"}}
    start = time.perf_counter()
    for i in range(0, messages, 2):
        app.invoke({"messages": [HumanMessage(_body(i, size))]}, config)
    appended = time.perf_counter() - start
    start = time.perf_counter()
    count = len(app.get_state(config).values["messages"])
    read = time.perf_counter() - start
    connection.commit()
    connection.close()
    return PeerRun(
        "LangGraph SqliteSaver",
        appended,
        read,
        _size(path),
        count,
        "every step stores the whole message list again",
    )


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


ADAPTERS: tuple[Callable[[Path, int, int], PeerRun | str], ...] = (
    openai_agents_run,
    langgraph_run,
)


def run(messages: int = 300, size: int = 2_000) -> tuple[list[PeerRun], list[str]]:
    """contextstore and every installed peer on the same messages, in this process.

    Returns the runs (contextstore first) and, for each peer that is missing, why.
    """
    with tempfile.TemporaryDirectory() as folder:
        runs = [contextstore_run(Path(folder), messages, size)]
        skipped = []
        for adapter in ADAPTERS:
            result = adapter(Path(folder), messages, size)
            if isinstance(result, str):
                skipped.append(result)
            else:
                runs.append(result)
    return runs, skipped
