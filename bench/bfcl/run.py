"""Carry BFCL multi-turn tasks through hango and check every state and result.

Each task is one session; each user turn one run (``Harness.start`` + ``execute``) through the
default stack, persisted in the store. After every turn the bench checks, and reports the first
failure as ``<task id> turn <i>: <what differs>``:

1. the run completed and called exactly the ground-truth calls, and the APIs executed them in
   that order (the execution log: a reordered batch can leave every result and the state as
   they would be, and still be wrong);
2. every tool result saved in the session equals the result of the same call made directly
   on a second set of instances (the reference), error flag included;
3. each API instance's public attributes equal the reference's (BFCL's state comparison);
4. the reference itself agrees with BFCL's own executor run on the ground-truth strings
   (``execute_multi_turn_func_call``: same results in BFCL's rendering, and BFCL's
   ``state_checker`` accepts hango's instances);
5. for tasks with held-out functions (``multi_turn_miss_func``), the model was offered exactly
   the functions available at that turn.

At the end of every task the whole saved session is checked again from its first turn
(``session.check_session``, as resume mode does): a harness that rewrites an earlier turn's
results, which each turn's own check no longer looks at, fails there.
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from attrs import define, field

from bench.bfcl.calls import Call, as_json, parse_call
from bench.bfcl.data import Task
from bench.bfcl.env import ApiEnv, bfcl_text, first_difference
from bench.bfcl.replay import ReplayModel
from bench.bfcl.schema import ERRATA, parameter_names
from bench.bfcl.session import BfclExecutor, check_session, log_difference
from bench.bfcl.tools import build_registry, task_docs
from hango import (
    AgentDefinition,
    Event,
    Harness,
    Message,
    RunStatus,
    RunStore,
    ToolCallFinished,
    ToolCallStarted,
    ToolRegistry,
    open_store,
)
from hango.discovery import default_stack
from hango.middleware import StackConfig
from hango.plugins import PluginManager, make_plugin_manager
from hango_repeat import DEFAULT_THRESHOLD, THRESHOLD_VARIABLE, call_key

#: Where the bench keeps its SQLite files by default (git-ignored).
DATA_DIR = Path(__file__).resolve().parents[1] / ".data" / "bfcl"


@define
class Stats:
    """What a bench run measured. Seconds are wall-clock (``time.perf_counter``).

    ``run_seconds`` is the time inside ``Harness.start`` + ``execute`` (``run_cpu_seconds`` the
    process CPU time spent there, every thread: on a shared machine other work stretches the
    wall clock, hardly the CPU time); ``api_seconds`` the part
    of it spent inside API methods; ``window_seconds`` the time from each ``ToolCallStarted``
    to its ``ToolCallFinished`` event (stack, argument validation, the call, the checkpoint),
    ``window_save_seconds`` the checkpoints' share of it; ``save_seconds`` / ``saves`` all the
    store's ``save_run`` calls; ``direct_seconds`` the time inside the same methods called
    directly on the reference instances.
    """

    category: str
    tasks: int = 0
    passed: int = 0
    runs: int = 0
    tool_calls: int = 0
    direct_calls: int = 0
    wall_seconds: float = 0.0
    run_seconds: float = 0.0
    run_cpu_seconds: float = 0.0
    api_seconds: float = 0.0
    window_seconds: float = 0.0
    window_save_seconds: float = 0.0
    in_window: bool = False
    save_seconds: float = 0.0
    saves: int = 0
    direct_seconds: float = 0.0
    most_identical_calls: int = 0
    stack: tuple[str, ...] = ()
    notes: list[str] = field(factory=list)
    failures: list[str] = field(factory=list)

    @property
    def harness_per_call(self) -> float:
        """Seconds of hango time (run time less API time) per tool call."""
        return (self.run_seconds - self.api_seconds) / max(1, self.tool_calls)

    @property
    def harness_cpu_per_call(self) -> float:
        """CPU seconds of hango (run CPU time less API time) per tool call."""
        return (self.run_cpu_seconds - self.api_seconds) / max(1, self.tool_calls)

    @property
    def direct_per_call(self) -> float:
        return self.direct_seconds / max(1, self.direct_calls)


class TimedStore:
    """A ``RunStore`` proxy that times ``save_run`` (the checkpoints) into ``stats`` and hands
    every other attribute to ``inner``."""

    def __init__(self, inner: RunStore, stats: Stats) -> None:
        self.inner = inner
        self.stats = stats

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def save_run(self, *args: Any, **kwargs: Any) -> int:
        start = time.perf_counter()
        try:
            return await self.inner.save_run(*args, **kwargs)
        finally:
            took = time.perf_counter() - start
            self.stats.save_seconds += took
            self.stats.saves += 1
            if self.stats.in_window:
                self.stats.window_save_seconds += took

    @classmethod
    def wrap(cls, inner: RunStore, stats: Stats) -> RunStore:
        # A proxy, not a RunStore subclass: the protocol grows (leases, queue) and the bench
        # times one method of whatever store it is given.
        return cast(RunStore, cls(inner, stats))


class CallTimer:
    """An ``emit`` callback adding each tool call's event window to ``stats.window_seconds``."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.started: dict[str, float] = {}

    async def __call__(self, event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            self.started[event.call.id] = time.perf_counter()
            self.stats.in_window = True
        elif isinstance(event, ToolCallFinished):
            begun = self.started.pop(event.call.id, None)
            self.stats.in_window = False
            if begun is not None:
                self.stats.window_seconds += time.perf_counter() - begun


def parsed_calls(task: Task) -> list[list[Call]]:
    """The task's ground truth parsed into calls, per turn."""
    docs = task_docs(task)

    def parameters(name: str) -> tuple[str, ...]:
        if name not in docs:
            raise ValueError(f"{task.id}: ground truth calls {name}, which no doc describes")
        return parameter_names(docs[name])

    return [[parse_call(source, parameters) for source in turn] for turn in task.ground_truth]


def identical_calls(calls: Sequence[Sequence[Call]]) -> int:
    """The most times one identical call occurs within one turn, "identical" as the
    repeat_call plugin defines it (``hango_repeat.call_key``: name and canonical arguments)."""
    most = 0
    for turn in calls:
        counts = collections.Counter(call_key(c.name, as_json(c.arguments)) for c in turn)
        most = max([most, *counts.values()])
    return most


def agent_for(task: Task, turn: int, registry: ToolRegistry) -> AgentDefinition:
    """The agent of one turn: every tool, or for a task with held-out functions an allowlist
    of the functions available at this turn."""
    allowlist = None
    if task.missed:
        held = task.held_out(turn)
        allowlist = tuple(t.spec.name for t in registry.view() if t.spec.name not in held)
    return AgentDefinition(name=f"bfcl-{task.category}", model="replay", tool_allowlist=allowlist)


def check_turn(
    task: Task,
    turn: int,
    calls: Sequence[Call],
    run_messages: Sequence[Message],
    executed: Sequence[tuple[str, Any]],
    env: ApiEnv,
    reference: ApiEnv,
    bfcl: BfclExecutor,
    stats: Stats,
) -> str | None:
    """Run turn ``turn``'s calls on ``reference`` and compare (module docstring, checks 1-4);
    ``executed`` lists the API calls hango made in the turn, in order, as ``(name, arguments
    as JSON)``. Returns the first difference or None.

    A ground-truth call to a function still held out at this turn (a defect of the data: the
    model was never offered it) must be refused by hango's allowlist, so its saved result must
    be an error and the API must not have been called; the reference still makes the call, so
    the state check says whether the ground-truth state is reached without it.
    """
    uses = [use for m in run_messages if m.role == "assistant" for use in m.tool_uses]
    made = [(u.name, u.input) for u in uses]
    wanted = [(c.name, as_json(c.arguments)) for c in calls]
    if made != wanted:
        return f"hango made calls {made}, the ground truth is {wanted}"
    results = collections.defaultdict(list)
    for message in run_messages:
        for result in message.tool_results:
            results[result.tool_use_id].append(result)
    held = task.held_out(turn)
    direct, rendered = [], []
    for call in calls:
        outcome = reference.call(call.name, call.arguments)
        stats.direct_seconds += outcome.seconds
        stats.direct_calls += 1
        direct.append(outcome)
        # Rendered at once: a method may return its live internal state, which later calls
        # change (BFCL renders each result as soon as the call returns, too).
        rendered.append(bfcl_text(outcome))
    for index, (use, outcome) in enumerate(zip(uses, direct, strict=True)):
        saved = results.get(use.id, [])
        if len(saved) != 1:
            return f"call {index} ({use.name}) has {len(saved)} saved results"
        if use.name in held:
            if not saved[0].is_error:
                return f"call {index} ({use.name}) is held out, yet it ran: {saved[0].content!r}"
            stats.notes.append(
                f"{task.id} turn {turn}: the ground truth calls {use.name}, which the task "
                f"holds out until a later turn; the allowlist refused it"
            )
        elif (saved[0].content, saved[0].is_error) != (outcome.text, outcome.is_error):
            return (
                f"call {index} ({use.name}) result {saved[0].content[:200]!r} "
                f"!= direct {outcome.text[:200]!r}"
            )
    difference = first_difference(env.instances, reference.instances)
    if difference is not None:
        return f"state differs at {difference}"
    allowed = [(c.name, as_json(c.arguments)) for c in calls if c.name not in held]
    if list(executed) != allowed:
        return f"execution log: {log_difference(list(executed), allowed)}"
    bfcl_results, bfcl_instances = bfcl.run(task.ground_truth[turn])
    if rendered != bfcl_results:
        return f"direct results {rendered} differ from BFCL's executor {bfcl_results}"
    verdict = bfcl.state_error(env.instances, bfcl_instances)
    if verdict:
        return f"BFCL's state_checker rejects hango's state: {verdict}"
    return None


def check_offered(task: Task, model: ReplayModel, registry: ToolRegistry) -> str | None:
    """Check 5: each turn offered exactly the task's functions not held out at that turn."""
    everything = frozenset(t.spec.name for t in registry.view())
    for turn in range(len(task.turns)):
        offered = model.offered.get(turn, frozenset()) & everything
        expected = everything - task.held_out(turn)
        if offered != expected:
            extra, missing = sorted(offered - expected), sorted(expected - offered)
            return f"turn {turn}: offered held-out {extra}, not offered {missing}"
    return None


async def run_task(
    task: Task,
    store: RunStore,
    plugins: PluginManager,
    settings: Mapping[str, str],
    stats: Stats,
) -> str | None:
    """Carry ``task`` through hango, checking every turn; returns the first failure or None."""
    calls = parsed_calls(task)
    env = ApiEnv.from_task(task)
    reference = ApiEnv.from_task(task)
    registry = build_registry(task, env)
    model = ReplayModel(task.id, calls)
    harness = Harness(store, plugins=plugins, model=model, tools=registry, settings=settings)
    timer = CallTimer(stats)
    bfcl = BfclExecutor(task)
    session: uuid.UUID | None = None
    try:
        for turn, text in enumerate(task.turns):
            calls_before, api_before, logged = env.calls, env.api_seconds, len(env.log)
            start, cpu = time.perf_counter(), time.process_time()
            run = await harness.start(agent_for(task, turn, registry), text, session_id=session)
            finished = await harness.execute(run.id, emit=timer)
            stats.run_seconds += time.perf_counter() - start
            stats.run_cpu_seconds += time.process_time() - cpu
            stats.runs += 1
            stats.tool_calls += env.calls - calls_before
            stats.api_seconds += env.api_seconds - api_before
            session = run.session_id
            if finished.status is not RunStatus.COMPLETED:
                return f"{task.id} turn {turn}: run {finished.status}: {finished.error}"
            history = await store.load_messages(harness.tenant_id, session)
            problem = check_turn(
                task,
                turn,
                calls[turn],
                history[run.message_start :],
                [(name, as_json(arguments)) for _, name, arguments in env.log[logged:]],
                env,
                reference,
                bfcl,
                stats,
            )
            if problem is not None:
                return f"{task.id} turn {turn}: {problem}"
        if task.missed:
            problem = check_offered(task, model, registry)
            if problem is not None:
                return f"{task.id} {problem}"
        assert session is not None
        history = await store.load_messages(harness.tenant_id, session)
        problem, _ = check_session(task, calls, history, env)
        return None if problem is None else f"{task.id} session: {problem}"
    finally:
        bfcl.close()


def bench_settings(
    base: Mapping[str, str], calls: Sequence[Sequence[Sequence[Call]]], stats: Stats
) -> dict[str, str]:
    """The settings for the runs: ``base``, with the repeat_call threshold raised (and a note
    saying so) only if some ground-truth turn repeats one identical call that often."""
    settings = dict(base)
    stats.most_identical_calls = max([0, *(identical_calls(task) for task in calls)])
    threshold = int(settings.get(THRESHOLD_VARIABLE) or DEFAULT_THRESHOLD)
    if stats.most_identical_calls >= threshold:
        settings[THRESHOLD_VARIABLE] = str(stats.most_identical_calls + 1)
        stats.notes.append(
            f"a ground-truth turn repeats one identical call {stats.most_identical_calls} "
            f"times; {THRESHOLD_VARIABLE} raised from {threshold} to "
            f"{settings[THRESHOLD_VARIABLE]} for these runs"
        )
    return settings


def default_db(category: str, suffix: str = "") -> str:
    """A fresh SQLite file for ``category`` under ``DATA_DIR`` (an older one is deleted)."""
    path = DATA_DIR / f"{category}{suffix}.db"
    for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)
    return f"sqlite:///{path}"


async def run_tasks(
    tasks: Sequence[Task], category: str, db: str, settings: Mapping[str, str]
) -> Stats:
    """Run ``tasks`` against the store at ``db``; failures are collected in the stats."""
    stats = Stats(category)
    started = time.perf_counter()
    settings = bench_settings(settings, [parsed_calls(t) for t in tasks], stats)
    offered = {name for task in tasks for name in task_docs(task)}
    stats.notes += [
        f"schema erratum {function}.{parameter}: {why}"
        for (function, parameter), (_, why) in ERRATA.items()
        if function in offered
    ]
    plugins = make_plugin_manager(env=settings)
    store = TimedStore.wrap(await open_store(db), stats)
    # The chain every run builds (Harness.execute calls default_stack the same way).
    stats.stack = tuple(m.name for m in default_stack(StackConfig(settings=settings), plugins))
    try:
        for task in tasks:
            stats.tasks += 1
            failure = await run_task(task, store, plugins, settings, stats)
            if failure is None:
                stats.passed += 1
            else:
                stats.failures.append(failure)
    finally:
        await store.aclose()
    stats.wall_seconds = time.perf_counter() - started
    return stats


def report(stats: Stats, db: str, version: str) -> str:
    """The bench's printed summary (times per tool call; ratios against the direct call)."""
    calls = max(1, stats.tool_calls)
    direct = max(stats.direct_per_call, 1e-12)
    window = (stats.window_seconds - stats.api_seconds) / calls
    checkpoint = stats.window_save_seconds / calls
    end_to_end = stats.run_seconds / calls

    def row(label: str, seconds: float) -> str:
        return f"  {label:<48} {seconds * 1e6:>10.1f} us  {seconds / direct:>8,.0f}x"

    lines = [
        f"BFCL {stats.category} (bfcl-eval {version}), store {db}",
        f"stack: {', '.join(stats.stack) or '(empty: no plugins installed)'}",
        *(f"note: {n}" for n in stats.notes),
        *(f"FAIL {f}" for f in stats.failures),
        f"tasks at ground-truth state: {stats.passed}/{stats.tasks}",
        f"runs: {stats.runs}  tool calls: {stats.tool_calls}  wall time: "
        f"{stats.wall_seconds:.1f} s  (most identical calls in one turn: "
        f"{stats.most_identical_calls})",
        f"harness time per tool call: {stats.harness_per_call * 1e3:.3f} ms "
        f"(run time {stats.run_seconds:.2f} s less API time {stats.api_seconds * 1e3:.1f} ms)",
        f"harness CPU time per tool call: {stats.harness_cpu_per_call * 1e3:.3f} ms "
        f"(process CPU time {stats.run_cpu_seconds:.2f} s less API time), "
        f"saves per tool call: {stats.saves / max(1, stats.tool_calls):.2f}",
        f"per tool call{'':<37} {'time':>13}  {'/ direct':>9}",
        row("API method called directly", direct),
        row("hango call, start to finish event, API excl.", window),
        row("  of which the checkpoint (store save)", checkpoint),
        row("  of which the rest (stack, validation, events)", window - checkpoint),
        row("hango run time / tool calls (end to end)", end_to_end),
        f"store saves: {stats.saves}, {stats.save_seconds / max(1, stats.saves) * 1e3:.3f} ms each",
    ]
    return "\n".join(lines)
