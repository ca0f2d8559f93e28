"""A long session with and without hango-summarization: the 500th run against the 10th::

    uv run python -m bench.session                 # 500 runs, SQLite
    uv run python -m bench.session --runs 200 --window 3000

``--runs`` runs, one after the other, in ONE session, through the ``Harness``: a model that
calls one tool, then answers (1 tool call and 2 model turns a run, 4 messages), decided from
the request's last message, so the model costs the same at any history length. It reports the
input tokens it is sent as a provider does (about a character in four), so the middleware
plans with real numbers; it answers summary requests itself.

Two stacks, alternating run by run in two sessions so drift on a shared machine hits both:
``none`` (an empty stack: every run loads and sends the whole session) and ``summarization``
(hango-summarization with a ``--window``-token context window, so compaction recurs).

Per run: its wall time and its process CPU time (``start`` + ``execute``: the harness's own
time, the model answering at once; CPU time leaves out the waits on the disk, which a shared
machine makes noisy) and the input tokens of every request it sent (summary calls included).
Reported: the median of runs 6-15 (the 10th), of the last ten (the 500th), and their ratio,
per stack; and the 10th run of a new session measured beside the 500th (its first 15 runs
alternate with the long session's last 15), so both see the same load on a shared machine, with
the ratio against it. The goal (issue 26): at most 1.3x on both with summarization.

Then the cost of the middleware on a call that does not compact: a run of 20 tool calls
through ``run_loop`` without a store (``bench.chain``'s runner), per model call, with no
middleware, a pass-through wrapper and hango-summarization, and each against none.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio

from hango import AgentDefinition, Harness, RunStatus, TextBlock, ToolRegistry, tool
from hango.agent.chain import Chain
from hango.provider.events import (
    MessageStop,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import Request, StopReason, Usage
from hango.store import open_store
from hango_summarization import Settings, SummarizationMiddleware
from hango_summarization.history import tokens

AGENT = AgentDefinition(name="bench", model="scripted:inline", max_turns=10)
ANSWER = "Here is what I found. " * 9  # about 200 characters


class OneCallModel:
    """Calls ``work`` once, then answers; answers a summary request with a summary. Keeps the
    input tokens of each request in ``sent``."""

    name = "one-call"

    def __init__(self) -> None:
        self.sent = 0

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        size = tokens(request.messages) + sum(len(b.text) for b in request.system) // 4
        self.sent += size
        usage = Usage(size, 10)
        last = request.messages[-1]
        block = last.content[-1]
        if isinstance(block, TextBlock) and block.text.startswith("<summarize>"):
            yield TextDelta(0, "The user asked questions; each was answered with one work call.")
            yield MessageStop(StopReason.END_TURN, usage)
            return
        if last.tool_results:
            yield TextDelta(0, ANSWER)
            yield MessageStop(StopReason.END_TURN, usage)
            return
        yield ToolUseStart(0, f"call_{uuid.uuid4().hex[:12]}", "work")
        yield ToolInputDelta(0, '{"label": "a"}')
        yield ToolUseStop(0)
        yield MessageStop(StopReason.TOOL_USE, usage)


@tool
async def work(label: str) -> str:
    """Do one unit of work.

    Args:
        label: which one.
    """
    return ANSWER


async def session(
    url: str, runs: int, stacks: dict[str, Callable[[], list[Any]]]
) -> dict[str, Any]:
    """Seconds, CPU seconds and request tokens per run (index 0 is run 1), per stack: of the
    long session (``long``) and of a new session (``beside``) whose first 15 runs alternate
    with the long one's last 15, so its 10th run is measured under the same machine load as
    the long session's last."""
    kinds = ("long", "beside")
    out: dict[str, dict[str, list[float]]] = {
        f"{n} {kind}": {"seconds": [], "cpu": [], "tokens": []} for n in stacks for kind in kinds
    }
    async with await open_store(url) as store:
        harnesses = {}
        models = {}
        for name, make in stacks.items():
            models[name] = OneCallModel()
            harnesses[name] = Harness(
                store,
                tenant_id=uuid.uuid4(),
                model=models[name],
                stack=lambda _config, make=make: make(),  # type: ignore[misc]
                tools=ToolRegistry([work]),
                settings={},
            )
        sessions: dict[str, uuid.UUID | None] = dict.fromkeys(out)

        async def one(name: str, kind: str, k: int) -> None:
            key = f"{name} {kind}"
            harness, model = harnesses[name], models[name]
            model.sent = 0
            start, cpu = time.perf_counter(), time.process_time()
            run = await harness.start(AGENT, f"question {k}", session_id=sessions[key])
            finished = await harness.execute(run.id)
            out[key]["seconds"].append(time.perf_counter() - start)
            out[key]["cpu"].append(time.process_time() - cpu)
            out[key]["tokens"].append(model.sent)
            if finished.status is not RunStatus.COMPLETED:
                raise SystemExit(f"{key} run {k} {finished.status.value}: {finished.error}")
            sessions[key] = run.session_id

        for k in range(1, runs + 1):
            for name in stacks:
                await one(name, "long", k)
                if k > runs - 15:
                    await one(name, "beside", k - (runs - 15))
    return out


async def overhead(k: int, repeats: int) -> dict[str, float]:
    """Seconds per model call of a run of ``k`` tool calls through ``run_loop`` (no store),
    with no middleware, one pass-through wrapper and hango-summarization (a 200,000-token
    window: it never compacts); the minimum over ``repeats`` rounds, cases in a new order
    each round."""
    import random

    from bench.chain import PassModel, loop_runner

    cases = {
        "none": loop_runner(k, Chain.build([])),
        "pass-through": loop_runner(k, Chain.build([PassModel("pass")])),
        "summarization": loop_runner(
            k, Chain.build([SummarizationMiddleware(Settings(context_window=200_000))])
        ),
    }
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeats):
        for name in random.sample(list(cases), len(cases)):
            start = time.perf_counter()
            await cases[name]()
            best[name] = min(best[name], (time.perf_counter() - start) / (k + 1))
    return best


def summary(values: list[float]) -> tuple[float, float, float]:
    tenth = statistics.median(values[5:15])
    last = statistics.median(values[-10:])
    return tenth, last, last / tenth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    # 2,000 tokens: the session compacts about every 5 runs, so by the 10th run it is in the
    # steady state the 500th is in.
    parser.add_argument("--window", type=int, default=2000, help="the context window, tokens")
    args = parser.parse_args()
    if args.runs < 20:
        raise SystemExit("--runs must be at least 20 (the 10th run is the median of runs 6-15)")
    settings = Settings(context_window=args.window, keep_tokens=args.window // 8)
    stacks: dict[str, Callable[[], list[Any]]] = {
        "none": lambda: [],
        "summarization": lambda: [SummarizationMiddleware(settings)],
    }
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        results = anyio.run(session, url, args.runs, stacks)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"session of {args.runs} runs (4 messages a run), SQLite, window {args.window} tokens; "
        f"python {platform.python_version()}, load {load:.2f}"
    )
    print(
        f"{'stack':<14} {'':<12} {'run 10':>9} {f'run {args.runs}':>9} {'ratio':>7}"
        f" {'run 10 beside':>14} {'ratio':>7}"
    )
    for name in stacks:
        long, beside = results[f"{name} long"], results[f"{name} beside"]
        for label, key, scale, unit in (
            ("time (ms)", "seconds", 1e3, ".2f"),
            ("cpu (ms)", "cpu", 1e3, ".2f"),
            ("tokens sent", "tokens", 1, ".0f"),
        ):
            first, last, ratio = summary(long[key])
            near = statistics.median(beside[key][5:15])
            print(
                f"{name if key == 'seconds' else '':<14} {label:<12} {first * scale:>9{unit}} "
                f"{last * scale:>9{unit}} {ratio:>6.2f}x {near * scale:>14{unit}} "
                f"{last / near:>6.2f}x"
            )
    per_call = anyio.run(overhead, 20, 100)
    base = per_call["none"]
    print("\na model call that does not compact (run_loop, 20 tool calls, no store), us per call:")
    for name, seconds in per_call.items():
        print(f"{name:<14} {seconds * 1e6:>8.1f} {seconds / base:>6.2f}x")


if __name__ == "__main__":
    main()
