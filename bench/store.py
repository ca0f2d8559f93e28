"""Store and workers: queue throughput with 1, 2 and 4 ``hango worker`` processes, and the
latency of one state save against the size of the state, SQLite and PostgreSQL side by side::

    uv run python -m bench.store                       # both parts, both back ends
    uv run python -m bench.store --part workers --runs 400
    uv run python -m bench.store --part saves --backends sqlite

PostgreSQL comes from HANGO_BENCH_DATABASE_URL (else HANGO_TEST_DATABASE_URL), a role that may
CREATE DATABASE; the benchmark works in a scratch database of its own and drops it. Without
either variable only SQLite is measured.

workers
    ``--runs`` queued runs of the demo agent (its tools, the installed plugins, its scripted
    turns with the stream delay removed: ``--model scripted:<copy>``) drained by N worker
    processes of ``--concurrency`` runs each. The clock starts before the first submit (the
    workers are already listening) and stops when the last run is completed; runs/s is
    ``--runs`` over that. Start-up of the worker processes is not counted.

saves
    ``save_run`` of a running run, as the loop does at a turn boundary: one new message and the
    whole state document (``dump_state``) holding 0, 100 or 1000 todos of about 60 characters.
    ``--saves`` saves per case, p50 and p99 in milliseconds.

Cases run in rounds (``--repeats``), back ends alternating in a new random order each round, so
drift on a shared machine hits both alike; a case's number is its best round (throughput) or
the pooled samples (latency). The title line carries the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import anyio

from hango import AgentDefinition, Harness, Message, RunStatus, TextBlock
from hango.agent.state import dump_state
from hango.middleware import State, Todo
from hango.store import RunSave, RunStore, open_store
from hango.testing import hango_executable, scratch_database

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "examples" / "demo"
HANGO = hango_executable()


@contextlib.contextmanager
def postgres_database() -> Iterator[str | None]:
    """A scratch PostgreSQL database, migrated; ``None`` when no server is configured."""
    admin = os.environ.get("HANGO_BENCH_DATABASE_URL") or os.environ.get("HANGO_TEST_DATABASE_URL")
    if not admin:
        yield None
        return
    with scratch_database(admin, prefix="hango_bench") as url:
        yield url


# -- workers -------------------------------------------------------------------------------


def fast_script(folder: Path) -> Path:
    """The demo's script without its stream delay (the benchmark measures hango, not sleeps)."""
    text = (DEMO / "script.toml").read_text(encoding="utf-8")
    path = folder / "script.toml"
    path.write_text(re.sub(r"(?m)^delay_ms\s*=.*$", "", text), encoding="utf-8")
    return path


async def submit(url: str, tenant: uuid.UUID, n: int) -> list[uuid.UUID]:
    async with await open_store(url) as store:
        harness = Harness(store, tenant_id=tenant)
        agent = AgentDefinition.from_file(DEMO / "agent.toml")
        return [
            (await harness.start(agent, f"job {i}", status=RunStatus.QUEUED)).id for i in range(n)
        ]


async def drained(url: str, tenant: uuid.UUID, n: int) -> None:
    async with await open_store(url) as store:
        while True:
            runs = await store.list_runs(tenant, limit=n + 1)
            if len(runs) == n and all(r.status is not RunStatus.QUEUED for r in runs):
                if all(r.status is RunStatus.COMPLETED for r in runs):
                    return
                bad = [r for r in runs if r.status in (RunStatus.FAILED, RunStatus.CANCELLED)]
                if bad:
                    raise SystemExit(f"run {bad[0].id} {bad[0].status.value}: {bad[0].error}")
            await anyio.sleep(0.02)


def throughput(url: str, workers: int, args: argparse.Namespace, script: Path) -> float:
    """Runs per second of ``workers`` worker processes draining ``args.runs`` demo runs."""
    tenant = uuid.uuid4()
    env = {**os.environ, "HANGO_DATABASE_URL": url, "HANGO_TENANT": str(tenant)}
    command = [HANGO, "worker", "--concurrency", str(args.concurrency)]
    with contextlib.ExitStack() as files:
        logs = [files.enter_context(tempfile.TemporaryFile()) for _ in range(workers)]
        procs = [
            subprocess.Popen([*command, "--model", f"scripted:{script}"], env=env, stderr=log)
            for log in logs
        ]
        return _drain(url, tenant, args, procs, logs)


def _drain(
    url: str,
    tenant: uuid.UUID,
    args: argparse.Namespace,
    procs: list[subprocess.Popen[bytes]],
    logs: list[IO[bytes]],
) -> float:
    try:
        for proc, log in zip(procs, logs, strict=True):
            while b" ready: " not in _output(log):
                if proc.poll() is not None:
                    raise SystemExit(f"worker exited: {_output(log).decode()}")
                time.sleep(0.05)

        async def measure() -> float:
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(submit, url, tenant, args.runs)
                await drained(url, tenant, args.runs)
            return args.runs / (time.perf_counter() - start)

        return anyio.run(measure)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)


def _output(log: IO[bytes]) -> bytes:
    log.seek(0)
    return log.read()


# -- saves ---------------------------------------------------------------------------------


async def save_latencies(url: str, todos: int, saves: int) -> list[float]:
    """Seconds per ``save_run`` of a state with ``todos`` todos, one new message each."""
    tenant = uuid.uuid4()
    async with await open_store(url) as store:
        agent = await store.put_agent(tenant, "bench", {"name": "bench"})
        run = await store.create_run(tenant, agent.id, Message.user("bench"))
        state = State(run.id, run.session_id, run.agent_id, tenant)
        state.todos = [
            Todo(f"Step {i}: read the file and check the limit it describes", "pending")
            for i in range(todos)
        ]
        state.private["repeat_call"] = {"counts": {f"read_file:{i}": 1 for i in range(20)}}
        messages = [Message.user("bench")]
        version, out = run.version, []
        for i in range(saves):
            messages.append(Message("assistant", (TextBlock(f"turn {i}: a short answer"),)))
            start = time.perf_counter()
            version = await store.save_run(
                RunSave(
                    tenant,
                    run.id,
                    version=version,
                    status=RunStatus.RUNNING,
                    state=dump_state(state),
                    messages=messages[-1:],
                    from_index=len(messages) - 1,
                )
            )
            out.append(time.perf_counter() - start)
        return out


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


# -- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["workers", "saves", "all"], default="all")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    wanted = args.backends.split(",")

    with tempfile.TemporaryDirectory() as tmp, postgres_database() as pg_url:
        urls = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}"}
        if pg_url and "postgres" in wanted:
            urls["postgres"] = pg_url
        urls = {k: v for k, v in urls.items() if k in wanted}
        anyio.run(_migrated, list(urls.values()))
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"## bench.store  (python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"load average {load})\n"
        )
        if args.part in ("workers", "all"):
            script = fast_script(Path(tmp))
            counts = [int(n) for n in args.workers.split(",")]
            best: dict[tuple[str, int], float] = {}
            for _ in range(args.repeats):
                cases = [(b, n) for n in counts for b in urls]
                random.shuffle(cases)
                for backend, n in cases:
                    rate = throughput(urls[backend], n, args, script)
                    best[backend, n] = max(best.get((backend, n), 0.0), rate)
            print(
                f"Queue throughput: {args.runs} demo runs, {args.concurrency} runs per worker, "
                f"best of {args.repeats}\n"
            )
            print("| workers | " + " | ".join(f"{b} runs/s" for b in urls) + " |")
            print("|---:|" + "---:|" * len(urls))
            for n in counts:
                print(f"| {n} | " + " | ".join(f"{best[b, n]:.1f}" for b in urls) + " |")
            print()
        if args.part in ("saves", "all"):
            samples: dict[tuple[str, int], list[float]] = {}
            for _ in range(args.repeats):
                cases = [(b, t) for t in (0, 100, 1000) for b in urls]
                random.shuffle(cases)
                for backend, todos in cases:
                    got = anyio.run(save_latencies, urls[backend], todos, args.saves)
                    samples.setdefault((backend, todos), []).extend(got)
            print(f"State save latency: {args.saves * args.repeats} saves per case, ms\n")
            heads = " | ".join(f"{b} p50 | {b} p99" for b in urls)
            print(f"| todos | state bytes | {heads} |")
            print("|---:|---:|" + "---:|---:|" * len(urls))
            for todos in (0, 100, 1000):
                size = _state_bytes(todos)
                cells = " | ".join(
                    f"{percentile(samples[b, todos], 50) * 1e3:.2f} | "
                    f"{percentile(samples[b, todos], 99) * 1e3:.2f}"
                    for b in urls
                )
                print(f"| {todos} | {size} | {cells} |")


async def _migrated(urls: list[str]) -> None:
    for url in urls:  # SQLite migrates on open; PostgreSQL was upgraded above
        store: RunStore = await open_store(url)
        await store.aclose()


def _state_bytes(todos: int) -> int:
    import json

    ids = uuid.uuid4()
    state = State(ids, ids, ids, ids)
    state.todos = [
        Todo(f"Step {i}: read the file and check the limit it describes", "pending")
        for i in range(todos)
    ]
    state.private["repeat_call"] = {"counts": {f"read_file:{i}": 1 for i in range(20)}}
    return len(json.dumps(dump_state(state)))


if __name__ == "__main__":
    main()
