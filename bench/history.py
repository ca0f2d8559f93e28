"""Long sessions and large runs, SQLite and PostgreSQL side by side::

    uv run python -m bench.history                         # every part, both back ends
    uv run python -m bench.history --part sessions --runs 500
    uv run python -m bench.history --part history --backends sqlite

PostgreSQL comes from HANGO_BENCH_DATABASE_URL (else HANGO_TEST_DATABASE_URL), a role that may
CREATE DATABASE; the benchmark works in a scratch database of its own and drops it. Without
either variable only SQLite is measured.

sessions
    ``--runs`` runs, one after the other, in ONE session (each continues the last), through the
    ``Harness`` with an empty middleware stack: a model that calls one tool, then answers (4
    messages a run, so run k starts with 4(k-1)+1 messages of history). A run's cost is its
    ``start`` + ``execute`` wall time. Reported: the median of runs 6-15 (the 10th) and of the
    last ten (the 500th), their ratio, and the same without the run's history load (its
    ``load_messages``, timed inside the run): the part that should not grow.

history
    A session holding 10, 100, 1000 and 5000 messages (a user prompt, then tool calls and
    results of about 200 characters); p50 of ``load_messages`` of the whole session and of
    ``save_run`` writing one new message at the end with the run's state (a turn boundary), and
    each against the 10-message case.

show
    ``hango runs show RUN_ID`` (a new process, as a user runs it) on a run whose answer is 10 MB
    of text, against one of 100 characters; the difference is the cost of the text.

Cases run in rounds (``--repeats``), back ends alternating in a new random order each round, so
drift on a shared machine hits both alike; a case's number pools every round's samples. The
title line carries the load average.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from bench.store import postgres_database
from hango import AgentDefinition, Harness, Message, RunStatus, TextBlock, ToolRegistry, tool
from hango.provider.events import (
    MessageStop,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import Request, StopReason, ToolResultBlock, ToolUseBlock, Usage
from hango.store import RunSave, open_store
from hango.testing import hango_executable

HANGO = hango_executable()
AGENT = AgentDefinition(name="bench", model="scripted:inline", max_turns=10)
ANSWER = "Here is what I found. " * 9  # about 200 characters


class OneCallModel:
    """Calls ``work`` once, then answers: decided from the last message alone, so the model
    costs the same at any history length (a scripted model counts the whole history)."""

    name = "one-call"

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        if request.messages[-1].tool_results:
            yield TextDelta(0, ANSWER)
            yield MessageStop(StopReason.END_TURN, Usage(10, 10))
            return
        yield ToolUseStart(0, f"call_{uuid.uuid4().hex[:12]}", "work")
        yield ToolInputDelta(0, '{"label": "a"}')
        yield ToolUseStop(0)
        yield MessageStop(StopReason.TOOL_USE, Usage(10, 10))


@tool
async def work(label: str) -> str:
    """Do one unit of work.

    Args:
        label: which one.
    """
    return ANSWER


# -- sessions ------------------------------------------------------------------------------


class LoadTimer:
    """The store, timing its ``load_messages`` calls: the history load of a run, measured
    inside that run."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def load_messages(self, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return await self._store.load_messages(*args)
        finally:
            self.seconds += time.perf_counter() - start


async def session_costs(url: str, runs: int) -> tuple[list[float], list[float]]:
    """Seconds per run of one session (index 0 is run 1), and of each the seconds spent
    loading the session's history."""
    tenant = uuid.uuid4()
    costs: list[float] = []
    loads: list[float] = []
    async with await open_store(url) as store:
        timed = LoadTimer(store)
        harness = Harness(
            timed,  # type: ignore[arg-type]
            tenant_id=tenant,
            model=OneCallModel(),
            stack=lambda _: [],
            tools=ToolRegistry([work]),
            settings={},
        )
        session: uuid.UUID | None = None
        for k in range(1, runs + 1):
            timed.seconds = 0.0
            start = time.perf_counter()
            run = await harness.start(AGENT, f"question {k}", session_id=session)
            finished = await harness.execute(run.id)
            costs.append(time.perf_counter() - start)
            loads.append(timed.seconds)
            if finished.status is not RunStatus.COMPLETED:
                raise SystemExit(f"run {k} {finished.status.value}: {finished.error}")
            session = run.session_id
    return costs, loads


# -- history -------------------------------------------------------------------------------


def history_of(n: int) -> list[Message]:
    """``n`` messages: a prompt, then tool calls and results of about 200 characters."""
    out = [Message.user("Read the logs and report.")]
    i = 0
    while len(out) < n:
        call = ToolUseBlock(f"call_{i}", "read_file", {"path": f"logs/part-{i}.txt"})
        out.append(Message("assistant", (TextBlock(ANSWER), call)))
        out.append(Message("user", (ToolResultBlock(f"call_{i}", ANSWER),)))
        i += 1
    return out[:n]


async def history_costs(url: str, n: int, samples: int) -> tuple[list[float], list[float]]:
    """Seconds per ``load_messages`` and per one-message ``save_run`` at ``n`` messages."""
    tenant = uuid.uuid4()
    messages = history_of(n)
    state: dict[str, Any] = {"version": 1, "todos": [], "private": {}}
    async with await open_store(url) as store:
        agent = await store.put_agent(tenant, "bench", {"name": "bench"})
        run = await store.create_run(tenant, agent.id, messages[0])
        version = await store.save_run(
            RunSave(
                tenant,
                run.id,
                version=run.version,
                status=RunStatus.RUNNING,
                state=state,
                messages=messages[1:],
                from_index=1,
            )
        )
        loads, saves = [], []
        for _ in range(samples):
            start = time.perf_counter()
            await store.load_messages(tenant, run.session_id)
            loads.append(time.perf_counter() - start)
        # Apart from the loads: their garbage would bill the saves for its collection.
        gc.collect()
        for i in range(samples):
            extra = Message("assistant", (TextBlock(f"{ANSWER} {i}"),))
            start = time.perf_counter()
            version = await store.save_run(
                RunSave(
                    tenant,
                    run.id,
                    version=version,
                    status=RunStatus.RUNNING,
                    state=state,
                    messages=[extra],
                    from_index=n,  # replaces the previous sample's message: the length stays n + 1
                )
            )
            saves.append(time.perf_counter() - start)
        return loads, saves


# -- show ----------------------------------------------------------------------------------


async def run_with_answer(url: str, tenant: uuid.UUID, chars: int) -> uuid.UUID:
    async with await open_store(url) as store:
        agent = await store.put_agent(tenant, "bench", {"name": "bench"})
        run = await store.create_run(tenant, agent.id, Message.user("write it all"))
        text = ("word " * 12 + "\n") * (chars // 61)
        await store.save_run(
            RunSave(
                tenant,
                run.id,
                version=run.version,
                status=RunStatus.COMPLETED,
                state={},
                messages=[Message("assistant", (TextBlock(text),))],
                from_index=1,
            )
        )
        return run.id


def show_seconds(url: str, tenant: uuid.UUID, run_id: uuid.UUID) -> float:
    env = {**os.environ, "HANGO_TENANT": str(tenant)}
    start = time.perf_counter()
    subprocess.run(
        [HANGO, "runs", "show", "--db", url, str(run_id)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


# -- main ----------------------------------------------------------------------------------


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["sessions", "history", "show", "all"], default="all")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    wanted = args.backends.split(",")

    with tempfile.TemporaryDirectory() as tmp, postgres_database() as pg_url:
        urls = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}"}
        if pg_url and "postgres" in wanted:
            urls["postgres"] = pg_url
        urls = {k: v for k, v in urls.items() if k in wanted}
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"## bench.history  (python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"load average {load})\n"
        )
        if args.part in ("sessions", "all"):
            sessions(urls, args)
        if args.part in ("history", "all"):
            history(urls, args)
        if args.part in ("show", "all"):
            show(urls, args)


def sessions(urls: dict[str, str], args: argparse.Namespace) -> None:
    runs = args.runs
    first, last = list(range(6, 16)), list(range(runs - 9, runs + 1))
    cost: dict[tuple[str, int], list[float]] = {}
    loaded: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        order = list(urls)
        random.shuffle(order)
        for backend in order:
            costs, loads = anyio.run(session_costs, urls[backend], runs)
            for k in (*first, *last):
                cost.setdefault((backend, k), []).append(costs[k - 1])
                loaded.setdefault((backend, k), []).append(loads[k - 1])

    def middle(table: dict[tuple[str, int], list[float]], backend: str, ks: list[int]) -> float:
        # The median: a shared machine's stalls hit single runs.
        return statistics.median(x for k in ks for x in table[backend, k])

    print(
        f"Per-run cost in one session of {runs} runs (4 messages a run, empty stack), "
        f"{args.repeats} sessions per back end, ms\n"
    )
    print(
        "| back end | run 10 | run 500 | 500 / 10 | load at 10 | load at 500 | "
        "run 10 less load | run 500 less load | 500 / 10 less load |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for backend in urls:
        a, b = middle(cost, backend, first), middle(cost, backend, last)
        la, lb = middle(loaded, backend, first), middle(loaded, backend, last)
        print(
            f"| {backend} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.2f} | {la * 1e3:.2f} | "
            f"{lb * 1e3:.2f} | {(a - la) * 1e3:.2f} | {(b - lb) * 1e3:.2f} | "
            f"{(b - lb) / (a - la):.2f} |"
        )
    print()


def history(urls: dict[str, str], args: argparse.Namespace) -> None:
    sizes = (10, 100, 1000, 5000)
    loads: dict[tuple[str, int], list[float]] = {}
    saves: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        cases = [(b, n) for n in sizes for b in urls]
        random.shuffle(cases)
        for backend, n in cases:
            got_loads, got_saves = anyio.run(history_costs, urls[backend], n, args.samples)
            loads.setdefault((backend, n), []).extend(got_loads)
            saves.setdefault((backend, n), []).extend(got_saves)
    print(
        f"Load and save against history length: p50 of {args.samples * args.repeats} samples, "
        "ms (x: against 10 messages)\n"
    )
    heads = " | ".join(f"{b} load | {b} save" for b in urls)
    print(f"| messages | {heads} |")
    print("|---:|" + "---:|---:|" * len(urls))
    for n in sizes:
        cells = []
        for b in urls:
            load, save = p50(loads[b, n]), p50(saves[b, n])
            base_load, base_save = p50(loads[b, 10]), p50(saves[b, 10])
            cells.append(
                f"{load * 1e3:.2f} ({load / base_load:.1f}x) | {save * 1e3:.2f} "
                f"({save / base_save:.1f}x)"
            )
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()


def show(urls: dict[str, str], args: argparse.Namespace) -> None:
    seconds: dict[tuple[str, str], list[float]] = {}
    for backend, url in urls.items():
        tenant = uuid.uuid4()
        runs = {
            "100 chars": anyio.run(run_with_answer, url, tenant, 100),
            "10 MB": anyio.run(run_with_answer, url, tenant, 10_000_000),
        }
        for _ in range(args.repeats):
            for size, run_id in random.sample(list(runs.items()), 2):
                seconds.setdefault((backend, size), []).append(show_seconds(url, tenant, run_id))
    print(f"`hango runs show` (a new process each time), best of {args.repeats}, s\n")
    print("| back end | 100 chars | 10 MB | 10 MB less 100 chars |")
    print("|---|---:|---:|---:|")
    for backend in urls:
        small, big = min(seconds[backend, "100 chars"]), min(seconds[backend, "10 MB"])
        print(f"| {backend} | {small:.2f} | {big:.2f} | {big - small:.2f} |")
    print()


if __name__ == "__main__":
    main()
