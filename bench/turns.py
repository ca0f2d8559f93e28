"""Per-turn harness cost against the length of the run: is turn 1000 as cheap as turn 10?

One run of N turns (default 1000) through the full installed stack, persisted: each turn is
one model call asking for one tool call with arguments never seen before in the run (so the
repeat detector's counts grow with the run), then a final answer. The model and the tool are
instant and record when they are entered and left, so the harness's own time for turn t is
the time from the end of model call t to the start of model call t + 1, less the tool's:
accumulating the response, the checkpoints, the tool call through the chain, building the
next request and calling the chain's model onion. Reported around turn 10 (turns 5-25) and
around turn N (its last 21 turns) as the first quartile of each window (``low_quartile``
says why), and their ratio (the aim is <= 1.3: per-turn work must not grow with the
history)::

    uv run python -m bench.turns                    # 1000 turns, SQLite and PostgreSQL
    uv run python -m bench.turns --turns 300 --repeats 3 --backend sqlite

PostgreSQL comes from ``HANGO_BENCH_DATABASE_URL`` / ``HANGO_TEST_DATABASE_URL`` (else the
local server hango.testing finds); the bench works in a scratch database it drops. Each
repeat runs every backend once, in a new random order, so drift on a shared machine hits
both alike; every repeat's numbers are printed, so the range is visible.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import anyio
from attrs import define, field

from hango import (
    AgentDefinition,
    Harness,
    Request,
    RunStatus,
    StopReason,
    TextDelta,
    Usage,
    open_store,
    tool,
)
from hango.provider.events import (
    MessageStop,
    StreamEvent,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.testing import postgres_admin_url, scratch_database
from hango.tool import ToolRegistry


@define
class Clock:
    """When each model call started and ended, and how long each tool call took (seconds):
    wall-clock (``time.perf_counter``) and this process's CPU time (``time.process_time``,
    every thread: SQLite works in a worker thread; a PostgreSQL server's own work is not in
    it). Other work on a shared machine stretches the wall clock, hardly the CPU time."""

    model_in: list[tuple[float, float]] = field(factory=list)
    model_out: list[tuple[float, float]] = field(factory=list)
    tool: list[tuple[float, float]] = field(factory=list)

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def harness(self, clock: int) -> list[float]:
        """Harness seconds of each turn t on ``clock`` (0 wall, 1 CPU): model call t's end
        to call t + 1's start, less turn t's tool call."""
        return [
            self.model_in[t + 1][clock] - self.model_out[t][clock] - self.tool[t][clock]
            for t in range(min(len(self.model_in) - 1, len(self.tool)))
        ]


class TurnsModel:
    """Asks for ``noop(n=turn)`` for ``turns`` turns, then answers."""

    name = "bench-turns"

    def __init__(self, turns: int, clock: Clock) -> None:
        self.turns = turns
        self.clock = clock
        self.calls = 0

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.clock.model_in.append(Clock.now())
        turn = self.calls
        self.calls += 1
        if turn < self.turns:
            yield ToolUseStart(0, f"toolu_{turn}", "noop")
            yield ToolInputDelta(0, f'{{"n": {turn}}}')
            yield ToolUseStop(0)
            stop = StopReason.TOOL_USE
        else:
            yield TextDelta(0, "done")
            stop = StopReason.END_TURN
        self.clock.model_out.append(Clock.now())
        yield MessageStop(stop, Usage(10, 5))


def registry(clock: Clock) -> ToolRegistry:
    @tool
    def noop(n: int) -> str:
        """Do nothing.

        Args:
            n: which turn.
        """
        wall, cpu = Clock.now()
        out = f"ok {n}"
        after = Clock.now()
        clock.tool.append((after[0] - wall, after[1] - cpu))
        return out

    # The recorded duration covers only the function body; the loop's own work around it
    # (validation, the chain) is the harness's and stays in the measure.
    return ToolRegistry([noop])


async def one_run(url: str, turns: int) -> Clock:
    """The clock of one run of ``turns`` turns on ``url``."""
    clock = Clock()
    async with await open_store(url) as store:
        harness = Harness(store, model=TurnsModel(turns, clock), tools=registry(clock))
        agent = AgentDefinition(name="turns", model="bench", max_turns=turns + 1)
        finished = await harness.run(agent, "go")
        if finished.status is not RunStatus.COMPLETED:
            raise SystemExit(f"the run ended {finished.status.value}: {finished.error}")
    return clock


#: Turns per window: turns 5-25 ("around turn 10") and the run's last 21.
WINDOW = 21


def low_quartile(samples: Sequence[float]) -> float:
    """The first quartile: on a shared machine other work only ever adds time to a turn, and
    bursts of it last longer than one turn, so a low quantile of a window is what the turns
    themselves cost (the median of a window a burst covers half of is the burst's)."""
    return statistics.quantiles(samples, n=4)[0]


def windows(per_turn: Sequence[float]) -> tuple[float, float]:
    """ms of the turns around turn 10 and of the run's last turns (``low_quartile``)."""
    early = per_turn[4 : 4 + WINDOW]
    late = per_turn[-WINDOW:]
    return low_quartile(early) * 1e3, low_quartile(late) * 1e3


@contextlib.contextmanager
def backends(names: Sequence[str]) -> Iterator[dict[str, str]]:
    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}
        if "sqlite" in names:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            urls["sqlite"] = f"sqlite:///{folder / 'turns.db'}"
        if "postgres" in names:
            admin = os.environ.get("HANGO_BENCH_DATABASE_URL") or postgres_admin_url()
            urls["postgres"] = stack.enter_context(scratch_database(admin, prefix="hango_bench"))
        yield urls


async def main(args: argparse.Namespace) -> None:
    names = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    load = os.getloadavg()[0]
    print(
        f"bench.turns {datetime.date.today()} CPython {platform.python_version()} "
        f"{platform.system()} {platform.machine()}, load average {load:.1f}: "
        f"{args.turns} turns, {args.repeats} repeats"
    )
    print(
        f"{'repeat':>6} {'backend':<9} {'wall ~10':>9} {'wall ~N':>9} {'ratio':>6} "
        f"{'cpu ~10':>9} {'cpu ~N':>9} {'ratio':>6} {'mean wall':>9}   (ms per turn)"
    )
    results: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in names}
    with backends(names) as urls:
        for repeat in range(1, args.repeats + 1):
            order = list(names)
            random.shuffle(order)
            for name in order:
                clock = await one_run(urls[name], args.turns)
                wall_early, wall_late = windows(clock.harness(0))
                cpu_early, cpu_late = windows(clock.harness(1))
                results[name].append((wall_early, wall_late, cpu_early, cpu_late))
                mean = statistics.fmean(clock.harness(0)) * 1e3
                print(
                    f"{repeat:>6} {name:<9} {wall_early:>9.3f} {wall_late:>9.3f} "
                    f"{wall_late / wall_early:>5.2f}x {cpu_early:>9.3f} {cpu_late:>9.3f} "
                    f"{cpu_late / cpu_early:>5.2f}x {mean:>9.3f}"
                )
    for name, rows in results.items():
        for label, at in (("wall", 0), ("cpu", 2)):
            early = [r[at] for r in rows]
            late = [r[at + 1] for r in rows]
            ratios = [b / a for a, b in zip(early, late, strict=True)]
            print(
                f"{name} {label}: turn ~10 {min(early):.2f}-{max(early):.2f} ms, turn "
                f"~{args.turns} {min(late):.2f}-{max(late):.2f} ms, ratio "
                f"{min(ratios):.2f}-{max(ratios):.2f}x"
            )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.turns", description=__doc__)
    parser.add_argument("--turns", type=int, default=1000, help="turns of the run (N)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per backend")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args(argv)
    if args.turns < 4 + 2 * WINDOW:
        parser.error(f"--turns must be at least {4 + 2 * WINDOW} (two windows of {WINDOW} turns)")
    return args


if __name__ == "__main__":
    anyio.run(main, parse_args())
