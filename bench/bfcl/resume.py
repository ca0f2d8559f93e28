"""Resume mode: kill each task's process once mid-turn, resume it in another, check the result.

For each task a child process (``python -m bench.bfcl.resume``) carries the task through hango
until its kill point, where it sends itself SIGKILL: no cleanup, no cancellation save, exactly
what a crash leaves. The parent process then resumes the killed run from the store with
``Harness.execute``, runs the remaining turns and checks the outcome.

The APIs stand in for an external service that outlives the agent: ``DurableEnv`` saves its
instances and a log of every call it executed to a file after each call, and the parent loads
them from there (it never had them in memory).

Kill points (``--kill``), by task index when alternating:

- ``stream``: during the model's stream of the first message of a turn, before it is saved;
- ``batch``: inside a tool call of a batch, before the API is called (the results of the
  earlier calls of the batch are saved). On resume the repair plugin answers the unfinished
  calls as interrupted and the replay model issues them again;
- ``effect``: inside a tool call AFTER the API executed it, before hango saved its result.
  hango cannot know the call ran (nothing was saved), so on resume it is answered as
  interrupted and issued again: the API runs it twice. This is the at-least-once window every
  harness has for a side effect outside its store; the mode shows that the check catches it.
  It is never part of ``alternate``.

Checks: the task reaches the ground-truth state (BFCL's comparison and BFCL's own
``state_checker``); each ground-truth call has exactly one completed result in the session,
equal to the direct call's; the log of executed calls equals the ground truth's call list, so no
call ran twice and none was skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import shutil
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
from attrs import define, field, frozen

from bench.bfcl.calls import Call
from bench.bfcl.data import Task, load_tasks
from bench.bfcl.env import ApiEnv, Outcome
from bench.bfcl.replay import ReplayModel, call_id, position
from bench.bfcl.run import DATA_DIR, Stats, agent_for, bench_settings, parsed_calls
from bench.bfcl.session import check_session
from bench.bfcl.tools import build_registry
from hango import Harness, Request, RunBusy, RunFinished, RunStatus, RunStore, open_store
from hango.config import DEFAULT_TENANT
from hango.plugins import make_plugin_manager
from hango.provider.events import StreamEvent

Phase = Literal["stream", "batch", "effect"]
PHASES: tuple[Phase, ...] = ("stream", "batch", "effect")
#: ``--kill`` choices: a phase, or "alternate" (stream for even task indices, batch for odd).
KILL_CHOICES = ("alternate", *PHASES)


def die() -> None:
    """End this process the way a crash does."""
    os.kill(os.getpid(), signal.SIGKILL)


@frozen
class KillPoint:
    """Where the child dies: ``phase`` at ``turn``; for the tool phases, in call ``call_id``."""

    phase: Phase
    turn: int
    call_id: str = ""

    def args(self) -> list[str]:
        return ["--phase", self.phase, "--turn", str(self.turn), "--call-id", self.call_id]


def kill_plan(task: Task, calls: Sequence[Sequence[Call]], phase: Phase) -> KillPoint:
    """The kill point of ``task``: at its middle ground-truth call (of the calls the task's
    allowlist lets through), in ``phase``; a task without calls dies in its first stream."""
    allowed = [
        (turn, index)
        for turn, turn_calls in enumerate(calls)
        for index, call in enumerate(turn_calls)
        if call.name not in task.held_out(turn)
    ]
    if not allowed:
        return KillPoint("stream", 0)
    turn, index = allowed[len(allowed) // 2]
    return KillPoint(phase, turn, call_id(turn, index))


class DurableEnv(ApiEnv):
    """An ``ApiEnv`` that outlives its process: after each call it saves its instances and its
    log of executed calls to ``path`` (pickle, written to a temporary file and renamed, so a
    kill leaves the old or the new file, never half)."""

    def __init__(
        self,
        instances: Mapping[str, object],
        path: Path,
        log: Sequence[tuple[str | None, str, dict[str, Any]]] = (),
        kill: KillPoint | None = None,
    ) -> None:
        super().__init__(instances, log)
        self.path = path
        self.kill = kill

    @classmethod
    def fresh(cls, task: Task, path: Path, kill: KillPoint | None = None) -> DurableEnv:
        env = cls(ApiEnv.from_task(task).instances, path, kill=kill)
        env.save()
        return env

    @classmethod
    def load(cls, path: Path) -> DurableEnv:
        with path.open("rb") as fh:
            doc = pickle.load(fh)
        return cls(doc["instances"], path, doc["log"])

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            pickle.dump({"instances": self.instances, "log": self.log}, fh)
        os.replace(tmp, self.path)

    def call(self, name: str, arguments: Mapping[str, Any], call_id: str | None = None) -> Outcome:
        here = self.kill.phase if self.kill is not None and call_id == self.kill.call_id else None
        if here == "batch":
            die()
        outcome = super().call(name, arguments, call_id)
        self.save()
        if here == "effect":
            die()
        return outcome


class KillingModel:
    """Delegates to ``inner``; on the first model call of turn ``turn`` it streams half of the
    message and dies."""

    def __init__(self, inner: ReplayModel, turn: int) -> None:
        self.inner = inner
        self.turn = turn

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        events = [event async for event in self.inner.stream(request)]
        turn, start = position(request.messages)
        first = turn == self.turn and start == len(request.messages) - 1
        for i, event in enumerate(events):
            if first and i == len(events) // 2:
                die()
            yield event


# -- the child process ---------------------------------------------------------------------


async def child(
    category: str, task_id: str, db: str, workdir: Path, kill: KillPoint, settings: dict[str, str]
) -> int:
    """Carry the task until ``kill``; returns 0 if the task ended without reaching it and 3 if
    a run did not complete (the parent reports both)."""
    task = load_tasks(category, ids=frozenset({task_id}))[0]
    calls = parsed_calls(task)
    env = DurableEnv.fresh(task, workdir / "world.pickle", kill)
    registry = build_registry(task, env)
    replay = ReplayModel(task.id, calls)
    model = KillingModel(replay, kill.turn) if kill.phase == "stream" else replay
    store = await open_store(db)
    try:
        plugins = make_plugin_manager(env=settings)
        harness = Harness(store, plugins=plugins, model=model, tools=registry, settings=settings)
        session: uuid.UUID | None = None
        for turn, text in enumerate(task.turns):
            run = await harness.start(agent_for(task, turn, registry), text, session_id=session)
            if session is None:
                (workdir / "session").write_text(str(run.session_id))
            session = run.session_id
            finished = await harness.execute(run.id)
            if finished.status is not RunStatus.COMPLETED:
                print(f"turn {turn}: run {finished.status}: {finished.error}", file=sys.stderr)
                return 3
        return 0
    finally:
        await store.aclose()


# -- the parent ------------------------------------------------------------------------------


@define
class ResumeStats:
    """What resume mode measured; ``reissued`` counts calls answered as interrupted and
    issued again, ``kills`` the kills per phase."""

    category: str
    phase: str
    tasks: int = 0
    passed: int = 0
    runs: int = 0
    tool_calls: int = 0
    reissued: int = 0
    wall_seconds: float = 0.0
    kills: dict[str, int] = field(factory=dict)
    notes: list[str] = field(factory=list)
    failures: list[str] = field(factory=list)


async def resume_task(
    task: Task,
    kill: KillPoint,
    store: RunStore,
    db: str,
    workdir: Path,
    settings: dict[str, str],
    stats: ResumeStats,
) -> str | None:
    """Kill, resume and check one task; returns the first failure or None."""
    await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, workdir, ignore_errors=True))
    await anyio.Path(workdir).mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "bench.bfcl.resume",
        "--category",
        task.category,
        "--task",
        task.id,
        "--db",
        db,
        "--workdir",
        str(workdir),
        "--settings",
        # A short claim: the killed child's hold on its run lapses in a second, as a crashed
        # executor's does after HANGO_RUN_LEASE_SECONDS, and the resume below can take it.
        json.dumps({CLAIM_SETTING: "1", **settings}),
        *kill.args(),
    ]
    done = await anyio.run_process(command, check=False)
    if done.returncode != -signal.SIGKILL:
        tail = done.stderr.decode(errors="replace")[-600:]
        return f"{task.id}: the child exited {done.returncode} before its kill point {kill}: {tail}"
    stats.kills[kill.phase] = stats.kills.get(kill.phase, 0) + 1
    session = uuid.UUID(await anyio.Path(workdir / "session").read_text())
    env = DurableEnv.load(workdir / "world.pickle")
    calls = parsed_calls(task)
    registry = build_registry(task, env)
    plugins = make_plugin_manager(env=settings)
    harness = Harness(
        store,
        plugins=plugins,
        model=ReplayModel(task.id, calls),
        tools=registry,
        settings=settings,
    )
    runs = await store.list_runs(DEFAULT_TENANT, session_id=session, limit=len(task.turns) + 1)
    killed = runs[0]
    if killed.status is RunStatus.COMPLETED:
        return f"{task.id}: the killed run {killed.id} is completed"
    for turn in range(len(runs) - 1, len(task.turns)):
        if turn == len(runs) - 1:
            finished = await _once_the_claim_lapses(harness, killed.id)
        else:
            run = await harness.start(
                agent_for(task, turn, registry), task.turns[turn], session_id=session
            )
            finished = await harness.execute(run.id)
        stats.runs += 1
        if finished.status is not RunStatus.COMPLETED:
            return f"{task.id} turn {turn}: resumed run {finished.status}: {finished.error}"
    stats.tool_calls += len(env.log)
    history = await store.load_messages(DEFAULT_TENANT, session)
    problem, interrupted = check_session(task, calls, history, env)
    stats.reissued += interrupted
    return None if problem is None else f"{task.id} (killed at {kill}): {problem}"


#: The setting of how long an executor's claim on a run lasts unless renewed (seconds).
CLAIM_SETTING = "HANGO_RUN_LEASE_SECONDS"


async def _once_the_claim_lapses(harness: Harness, run_id: uuid.UUID) -> RunFinished:
    """Execute the killed run once the dead child's claim on it has lapsed (``RunBusy``
    until then: one executor per run)."""
    with anyio.fail_after(30):
        while True:
            try:
                return await harness.execute(run_id)
            except RunBusy:
                await anyio.sleep(0.2)


async def run_resume_tasks(
    tasks: Sequence[Task],
    category: str,
    db: str,
    base_settings: Mapping[str, str],
    phase: str = "alternate",
    workroot: Path = DATA_DIR / "resume",
) -> ResumeStats:
    """Resume mode over ``tasks``; ``phase`` is one of ``KILL_CHOICES``."""
    stats = ResumeStats(category, phase)
    started = time.perf_counter()
    measured = Stats(category)
    settings = bench_settings(base_settings, [parsed_calls(t) for t in tasks], measured)
    stats.notes = measured.notes
    store = await open_store(db)
    try:
        for i, task in enumerate(tasks):
            stats.tasks += 1
            kill = kill_plan(task, parsed_calls(task), _phase(phase, i))
            failure = await resume_task(task, kill, store, db, workroot / task.id, settings, stats)
            if failure is None:
                stats.passed += 1
            else:
                stats.failures.append(failure)
    finally:
        await store.aclose()
    stats.wall_seconds = time.perf_counter() - started
    return stats


def _phase(choice: str, index: int) -> Phase:
    """The kill phase of task ``index`` for ``--kill choice``; ``ValueError`` for a bad one."""
    if choice == "alternate":
        return PHASES[index % 2]
    for phase in PHASES:
        if phase == choice:
            return phase
    raise ValueError(f"unknown kill phase {choice!r}; choose from {', '.join(KILL_CHOICES)}")


def resume_report(stats: ResumeStats, db: str, version: str) -> str:
    kills = ", ".join(f"{n} {p}" for p, n in sorted(stats.kills.items())) or "none"
    return "\n".join(
        [
            f"BFCL {stats.category} resume mode, kills: {stats.phase} (bfcl-eval {version}), "
            f"store {db}",
            *(f"note: {n}" for n in stats.notes),
            *(f"FAIL {f}" for f in stats.failures),
            f"tasks at ground-truth state after a kill and resume, no call run twice: "
            f"{stats.passed}/{stats.tasks}",
            f"kills: {kills}; resumed and later runs: {stats.runs}; calls answered as "
            f"interrupted and issued again: {stats.reissued}; API calls executed: "
            f"{stats.tool_calls}; wall time: {stats.wall_seconds:.1f} s",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """The child process (``resume_task`` starts it)."""
    parser = argparse.ArgumentParser(prog="python -m bench.bfcl.resume")
    parser.add_argument("--category", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--settings", required=True)
    parser.add_argument("--phase", required=True, choices=PHASES)
    parser.add_argument("--turn", required=True, type=int)
    parser.add_argument("--call-id", default="")
    args = parser.parse_args(argv)
    kill = KillPoint(args.phase, args.turn, args.call_id)
    return anyio.run(
        child, args.category, args.task, args.db, args.workdir, kill, json.loads(args.settings)
    )


if __name__ == "__main__":
    raise SystemExit(main())
