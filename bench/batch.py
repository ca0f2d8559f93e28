"""Concurrent tool batches: what running a batch's calls at once saves, and what it costs.

::

    uv run python -m bench.batch                   # both parts
    uv run python -m bench.batch --part wall --calls 8 --wait-ms 100
    uv run python -m bench.batch --part cost --calls 8 --wrappers 3

wall
    One batch of ``--calls`` tool calls that each wait ``--wait-ms`` (an ``anyio.sleep``, as a
    network call would), run by ``AgentLoop.run_batch`` through a chain of ``--wrappers``
    pass-through tool wrappers, with ``max_tool_concurrency`` = the batch size (concurrent)
    and = 1 (one by one). Reports both wall times and their ratio (the aim: <= 0.2x for 8
    calls of 100 ms).

cost
    The same batch of calls that return at once: the time per tool call of the loop and the
    chain around it (argument validation, the onion, the result added to history, a no-op
    checkpoint, events), concurrent against one by one, through the installed default stack
    (``--stack default``: every shipped tool wrapper, as a run gets them) and through
    ``--wrappers`` pass-through layers (``--stack passthrough``: the loop's own share, the
    worst case for the ratio). Concurrency costs a task per call (anyio's, 15-30 us on a busy
    machine); the aim is within 1.2x for the default stack.

run
    Whole runs through ``Harness`` on a SQLite file (the real checkpoints): one batch of
    ``--calls`` instant calls and a final answer, with the features on and off: concurrency
    (``max_tool_concurrency`` = the batch size against 1) and structured output (an
    ``output_schema`` answered natively against a prose answer). Reports ms per run and the
    ratios.

Every number is the minimum over ``--repeats`` rounds; in each round both cases run once, in a
new random order, so drift on a shared machine hits both alike. The loop runs on an in-memory
state with a no-op checkpoint: the store's cost per checkpoint is ``bench.store``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from hango import AgentDefinition, Harness
from hango.agent.chain import Chain
from hango.agent.loop import AgentLoop, LoopSettings
from hango.agent.middleware import ToolCallRequest, ToolHandler
from hango.agent.state import State
from hango.config import StackConfig
from hango.discovery import default_stack
from hango.plugins import make_plugin_manager
from hango.provider.messages import Message, ToolUseBlock
from hango.provider.scripted import ScriptedModel
from hango.store.sqlite import SqliteRunStore
from hango.tool.base import ToolResult
from hango.tool.function import tool
from hango.tool.registry import ToolRegistry


class PassThrough:
    """A tool wrapper that only calls ``next`` (the cost of one layer)."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        return await next(req)


def _tools(wait: float) -> ToolRegistry:
    @tool
    async def fetch(n: int) -> str:
        """Fetch item ``n``."""
        if wait:
            await anyio.sleep(wait)
        return "ok"

    return ToolRegistry([fetch])


async def _nothing(_: object) -> None:
    return None


class Batch:
    """A loop whose history ends with one assistant message of ``calls`` fetch calls; ``run``
    runs that batch once (and drops its results, so it can run again)."""

    def __init__(
        self, calls: int, wait: float, wrappers: int, concurrency: int, stack: str = "passthrough"
    ) -> None:
        if stack == "default":
            config = StackConfig(settings={})
            chain = Chain.build(default_stack(config, make_plugin_manager(env={})))
        else:
            chain = Chain.build([PassThrough(f"w{i}") for i in range(wrappers)])
        ids = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        self.state = State(*ids)
        self.calls = tuple(ToolUseBlock(f"c{i}", "fetch", {"n": i}) for i in range(calls))
        self.start = [Message.user("go"), Message("assistant", self.calls)]
        self.loop = AgentLoop(
            self.state,
            chain=chain,
            model=ScriptedModel([]),
            view=_tools(wait).view(),
            settings=LoopSettings("bench", max_tool_concurrency=concurrency),
            emit=_nothing,
            checkpoint=_nothing,
        )
        self.tools = self.loop.tools_now()

    async def run(self) -> float:
        self.state.messages[:] = self.start
        began = time.perf_counter()
        await self.loop.run_batch(self.calls, self.tools)
        took = time.perf_counter() - began
        assert len(self.state.messages[-1].tool_results) == len(self.calls)
        return took


async def _measure(cases: dict[str, Batch], repeats: int, inner: int) -> dict[str, float]:
    best = dict.fromkeys(cases, float("inf"))
    names = list(cases)
    for _ in range(repeats):
        random.shuffle(names)
        for name in names:
            total = 0.0
            for _ in range(inner):
                total += await cases[name].run()
            best[name] = min(best[name], total / inner)
    return best


async def wall(calls: int, wait_ms: float, wrappers: int, repeats: int) -> dict[str, float]:
    wait = wait_ms / 1000
    cases = {
        "concurrent": Batch(calls, wait, wrappers, concurrency=calls),
        "one by one": Batch(calls, wait, wrappers, concurrency=1),
    }
    return await _measure(cases, repeats, inner=1)


async def cost(calls: int, wrappers: int, repeats: int, stack: str) -> dict[str, float]:
    cases = {
        "concurrent": Batch(calls, 0.0, wrappers, concurrency=calls, stack=stack),
        "one by one": Batch(calls, 0.0, wrappers, concurrency=1, stack=stack),
    }
    return await _measure(cases, repeats, inner=50)


def _agent(calls: int, concurrency: int, output: bool) -> tuple[AgentDefinition, list[Any]]:
    answer = json.dumps({"items": calls}) if output else "All fetched."
    turns: list[Any] = [
        {"tool_calls": [{"name": "fetch", "input": {"n": i}} for i in range(calls)]},
        {"text": answer},
    ]
    schema = {"type": "object", "properties": {"items": {"type": "integer"}}}
    agent = AgentDefinition(
        name="bench",
        model="scripted:inline",
        max_tool_concurrency=concurrency,
        output_schema=schema if output else None,
    )
    return agent, turns


async def runs(calls: int, repeats: int) -> dict[str, float]:
    cases = {
        "concurrent": (calls, False),
        "one by one": (1, False),
        "with output": (calls, True),
    }
    best = dict.fromkeys(cases, float("inf"))
    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteRunStore.open(f"sqlite:///{Path(tmp) / 'bench.db'}")
        async with store:
            harnesses = {}
            for name, (concurrency, output) in cases.items():
                agent, turns = _agent(calls, concurrency, output)
                harness = Harness(
                    store,
                    model=ScriptedModel.from_turns(turns),
                    tools=_tools(0.0),
                    stack=lambda _config: [],
                    settings={},
                )
                harnesses[name] = (harness, agent)
            names = list(cases)
            for _ in range(repeats):
                random.shuffle(names)
                for name in names:
                    harness, agent = harnesses[name]
                    began = time.perf_counter()
                    for _ in range(5):
                        finished = await harness.run(agent, "go")
                        assert finished.status.value == "completed", finished.error
                    best[name] = min(best[name], (time.perf_counter() - began) / 5)
    return best


def _title() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"bench.batch (load average {load})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["wall", "cost", "run", "all"], default="all")
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--wait-ms", type=float, default=100.0)
    parser.add_argument("--wrappers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(_title())
    if args.part in ("wall", "all"):
        w = asyncio.run(wall(args.calls, args.wait_ms, args.wrappers, args.repeats))
        ratio = w["concurrent"] / w["one by one"]
        print(
            f"wall: {args.calls} calls x {args.wait_ms:g} ms, {args.wrappers} wrappers: "
            f"concurrent {w['concurrent'] * 1000:.1f} ms | one by one "
            f"{w['one by one'] * 1000:.1f} ms | ratio {ratio:.3f}x (aim <= 0.2x)"
        )
    if args.part in ("cost", "all"):
        for stack in ("default", "passthrough"):
            c = asyncio.run(cost(args.calls, args.wrappers, args.repeats, stack))
            per = {k: v / args.calls * 1e6 for k, v in c.items()}
            ratio = per["concurrent"] / per["one by one"]
            what = "default stack" if stack == "default" else f"{args.wrappers} pass-throughs"
            print(
                f"cost: per instant tool call, {what}: concurrent "
                f"{per['concurrent']:.1f} us | one by one {per['one by one']:.1f} us | ratio "
                f"{ratio:.2f}x (aim <= 1.2x)"
            )

    if args.part in ("run", "all"):
        r = asyncio.run(runs(args.calls, args.repeats))
        print(
            f"run: {args.calls} instant calls + answer, SQLite: concurrent "
            f"{r['concurrent'] * 1000:.2f} ms | one by one {r['one by one'] * 1000:.2f} ms | "
            f"ratio {r['concurrent'] / r['one by one']:.2f}x; with output_schema "
            f"{r['with output'] * 1000:.2f} ms, ratio {r['with output'] / r['concurrent']:.2f}x"
        )


if __name__ == "__main__":
    main()
