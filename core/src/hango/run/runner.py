"""Run one run: load its state and history, build the stack, loop, save at every boundary.

``Harness`` is the entry point Python callers and the CLI use::

    async with await open_store("sqlite:///.hango/hango.db") as store:
        harness = Harness(store)
        run = await harness.start(AgentDefinition.from_file("agent.toml"), "hello")
        async with harness.stream(run.id) as events:
            async for event in events:
                ...
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence

import anyio
import attrs
from opentelemetry.trace import SpanKind

from hango import telemetry
from hango.agent import spans
from hango.agent.blame import MiddlewareError
from hango.agent.chain import Chain
from hango.agent.definition import AgentDefinition, AgentFileError
from hango.agent.events import Event, RunFinished, RunStarted, RunStatus
from hango.agent.interrupts.records import Decision, Interrupt, PendingAction, misplaced
from hango.agent.loop import LoopOutcome, LoopSettings, run_loop
from hango.agent.middleware import Middleware, ToolChecker
from hango.agent.state import (
    State,
    StateError,
    load_run_state,
    load_state,
    new_run_state,
)
from hango.agent.storable import DEFAULT_MAX_RESULT_CHARS
from hango.config import (
    DEFAULT_TENANT,
    ConfigError,
    HangoWarning,
    StackConfig,
    hango_settings,
    int_setting,
)
from hango.plugins import PluginManager, make_plugin_manager
from hango.provider.errors import ModelError
from hango.provider.messages import JSON, Message, Usage
from hango.provider.model import Model
from hango.run.decide import Decided, decide_run
from hango.run.plan import Planner, RunNotResumable, RunPlan, StackFactory
from hango.run.saver import Saver
from hango.run.step import StepBudget, StepResult, claimed, executor_name, run_lease_seconds
from hango.store.base import (
    Lease,
    LeaseLost,
    RunRecord,
    RunStore,
    StaleVersion,
    StoreUnavailable,
    UnstorableContent,
)
from hango.store.memory import memory_of_run
from hango.store.workspace import bound_store
from hango.tool.registry import ToolRegistry

__all__ = ["AllowlistWarning", "Harness", "RunNotResumable", "StackFactory"]


class AllowlistWarning(HangoWarning):
    """An agent's ``tool_allowlist`` names a tool that nothing provides."""


async def _discard(_: Event) -> None:
    return None


#: The Harness executing the current run, seen by its middlewares and tools (a sub-agent starts
#: and executes its child runs through it: the same store, tenant, plugins and settings).
_EXECUTING: contextvars.ContextVar[Harness] = contextvars.ContextVar("hango_executing_harness")


def executing_harness() -> Harness:
    """The ``Harness`` executing the run whose middleware or tool is calling. Raises
    ``LookupError`` outside a run's execution."""
    return _EXECUTING.get()


@contextlib.contextmanager
def _executing(harness: Harness) -> Iterator[None]:
    token = _EXECUTING.set(harness)
    try:
        yield
    finally:
        _EXECUTING.reset(token)


class Harness:
    """Starts and executes runs against one store.

    ``middleware``: middleware objects for every agent's ``agent`` slot, after the agent's own
    (the default stack stays). ``stack`` replaces the whole stack with a factory of middleware
    lists (tests); ``plugins`` is the plugin manager (default: the installed plugins).
    ``model`` overrides every agent's model with an object; ``model_spec`` / ``base_url``
    override it with a spec (``--model``), recorded with the runs this harness starts.
    ``tools`` replaces the tools named in agent files; ``settings`` are the ``HANGO_*``
    settings plugins read as defaults (default: the environment), and
    ``HANGO_TOOL_RESULT_MAX_CHARS`` (characters of a tool result kept in history, default
    100,000; ``ConfigError`` if not a positive integer).

    A run records what it started with (its stack, with each middleware's distribution and
    version, and its model spec); ``execute`` rebuilds exactly that, whichever process runs it.
    Each run is planned once (``hango.run.plan``): ``start`` makes its ``RunPlan`` and an
    ``execute`` of that run in this harness uses it; a run continued here otherwise (resume,
    a worker) gets one plan per ``execute``.
    """

    def __init__(
        self,
        store: RunStore,
        *,
        tenant_id: uuid.UUID = DEFAULT_TENANT,
        middleware: Sequence[Middleware] = (),
        stack: StackFactory | None = None,
        plugins: PluginManager | None = None,
        model: Model | None = None,
        model_spec: str | None = None,
        base_url: str | None = None,
        tools: ToolRegistry | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.tenant_id = tenant_id
        self._plugins = plugins
        # The harness's model, tools, middleware and settings live in its planner, which
        # makes every plan from them (setting one here changes the next plan).
        self.planner = Planner(
            settings=dict(hango_settings() if settings is None else settings),
            plugins=lambda: self.plugins,
            middleware=middleware,
            stack=stack,
            tools=tools,
            model=model,
            model_spec=model_spec,
            base_url=base_url,
        )
        self.max_result_chars = int_setting(
            self.settings, "HANGO_TOOL_RESULT_MAX_CHARS", DEFAULT_MAX_RESULT_CHARS
        )
        self.lease_seconds = run_lease_seconds(self.settings)
        # Agents holding Python objects, by the id of a run started here: only this process
        # can continue those runs.
        self._live: dict[uuid.UUID, AgentDefinition] = {}
        # Plans made here for runs to execute here next (start, decide): execute takes them.
        self._planned: dict[uuid.UUID, RunPlan] = {}

    @property
    def settings(self) -> Mapping[str, str]:
        """The ``HANGO_*`` settings every run of this harness reads."""
        return self.planner.settings

    @settings.setter
    def settings(self, value: Mapping[str, str]) -> None:
        self.planner.settings = value

    @property
    def model(self) -> Model | None:
        """The model object overriding every agent's, or None."""
        return self.planner.model

    @model.setter
    def model(self, value: Model | None) -> None:
        self.planner.model = value

    @property
    def model_spec(self) -> str | None:
        """The model spec overriding every agent's (``--model``), or None."""
        return self.planner.model_spec

    @model_spec.setter
    def model_spec(self, value: str | None) -> None:
        self.planner.model_spec = value

    @property
    def base_url(self) -> str | None:
        """The base URL going with ``model_spec``, or None."""
        return self.planner.base_url

    @base_url.setter
    def base_url(self, value: str | None) -> None:
        self.planner.base_url = value

    @property
    def tools(self) -> ToolRegistry | None:
        """The tools replacing the agents' own, or None."""
        return self.planner.tools

    @tools.setter
    def tools(self, value: ToolRegistry | None) -> None:
        self.planner.tools = value

    @property
    def middleware(self) -> tuple[Middleware, ...]:
        """Middleware objects for every agent's ``agent`` slot."""
        return self.planner.middleware

    @middleware.setter
    def middleware(self, value: Sequence[Middleware]) -> None:
        self.planner.middleware = tuple(value)

    @property
    def plugins(self) -> PluginManager:
        """The plugin manager (the installed plugins unless one was given); loaded once."""
        if self._plugins is None:
            self._plugins = make_plugin_manager(env=self.settings)
        return self._plugins

    async def start(
        self,
        agent: AgentDefinition,
        message: str,
        *,
        session_id: uuid.UUID | None = None,
        status: RunStatus = RunStatus.RUNNING,
        engine: str | None = None,
        parent_run_id: uuid.UUID | None = None,
        parent_tool_call_id: str | None = None,
    ) -> RunRecord:
        """Record a new run of ``agent`` with the user ``message`` (in a new session unless
        ``session_id`` continues one), with its stack and model. ``status=QUEUED`` leaves it
        for a worker; ``engine`` names the engine that will execute it (``hango.run.engine``:
        recorded as ``config["engine"]``; the run stays ``running`` with no lease, so the own
        queue's workers never take it) and, like a queued run, needs a portable agent.
        ``parent_run_id`` / ``parent_tool_call_id``: a sub-agent's child run, answering that
        tool call of that run (``RunStore.create_run``).

        Raises, before recording anything: ``AgentFileError`` (a tool path does not import),
        ``ConfigError`` (an agent middleware or an ``[options.*]`` table is invalid, a plugin
        setting is invalid, or a run to queue has an agent holding Python objects) or
        ``PluginError``.
        """
        plan = self.planner.new(agent)
        _check_tools(agent, plan.tools, plan.chain)
        if (status is RunStatus.QUEUED or engine is not None) and not agent.portable:
            # A worker rebuilds the agent from its stored JSON, which cannot hold the objects.
            # (Middleware objects given to the Harness are fine: only workers whose Harness
            # has middleware of those names claim the run.)
            raise ConfigError(
                f"agent {agent.name!r} holds Python objects "
                f"({', '.join(agent.in_process_parts())}) that a worker cannot rebuild; name "
                "them in the agent (model spec, tools as module:attr, middleware by plugin "
                "name) to queue its runs, or give middleware objects to the Harness"
            )
        record = await self.store.put_agent(self.tenant_id, agent.name, agent.to_json())
        run = await self.store.create_run(
            self.tenant_id,
            record.id,
            Message.user(message),
            session_id=session_id,
            status=status,
            config={
                **plan.record(),
                # Started for workers: a decision puts it back on the queue (hango resume).
                "queued": status is RunStatus.QUEUED,
                **({"engine": engine} if engine is not None else {}),
            },
            parent_run_id=parent_run_id,
            parent_tool_call_id=parent_tool_call_id,
        )
        if not agent.portable or agent.output_type is not None:
            # Only this process can continue it, or return its output as the agent's type.
            self._live[run.id] = agent
        if status is RunStatus.RUNNING:
            self._planned[run.id] = plan
        return run

    def stack_config(self, agent: AgentDefinition) -> StackConfig:
        """What plugins build a run's middlewares from; the agent's ``[options.*]`` tables are
        validated here (``ConfigError`` naming the table and field)."""
        return self.planner.stack_config(agent)

    def installed_middleware(self) -> frozenset[str]:
        """The middleware names this harness can build: what the installed plugins provide,
        and the objects it was given. A worker claims only runs whose stack is within it."""
        return self.planner.installed()

    async def _continuable(self, run: RunRecord, agent: AgentDefinition | None) -> RunPlan:
        """The plan to continue ``run`` with here: the one made for it here (``start``,
        ``decide``), else one made now from its stored agent and exactly its recorded stack.
        Raises ``RunNotResumable`` naming what this process lacks, writing nothing."""
        planned = self._planned.get(run.id)
        if planned is not None and (agent is None or agent is planned.agent):
            return planned
        agent_record = await self.store.get_agent(self.tenant_id, run.agent_id)
        stored = AgentDefinition.from_json(agent_record.definition, source=f"agent {run.agent_id}")
        agent = agent or self._live.get(run.id)
        if agent is None:
            if not stored.portable:
                raise RunNotResumable(
                    f"run {run.id} was started with Python objects "
                    f"({', '.join(stored.in_process_parts())}); only the process holding them "
                    "can continue it (Harness.execute(run_id, agent=...))"
                )
            agent = stored
        elif agent.name != stored.name:
            raise RunNotResumable(
                f"run {run.id} belongs to agent {stored.name!r}, not {agent.name!r}"
            )
        return self.planner.recorded(run, agent)

    async def run(
        self,
        agent: AgentDefinition,
        message: str,
        *,
        session_id: uuid.UUID | None = None,
        emit: Callable[[Event], Awaitable[None]] = _discard,
    ) -> RunFinished:
        """``start`` then ``execute``."""
        run = await self.start(agent, message, session_id=session_id)
        return await self.execute(run.id, emit=emit)

    async def decide(
        self,
        run_id: uuid.UUID,
        decisions: Mapping[str, Decision],
        *,
        queue: bool = True,
        agent: AgentDefinition | None = None,
    ) -> Decided:
        """Record a person's ``decisions`` (tool call id -> ``Decision``) for the suspended run
        ``run_id``, each bound to its pending action (run, call id, argument digest).

        Once no pending action waits, the run is put back on the queue (``queue=True``: a
        worker continues it) or left ``running`` for this process to ``execute``. Sending a
        decision already recorded is a no-op. Raises ``NotFound``, ``StateError`` and
        ``DecisionRefused`` (a call with no pending action, already decided otherwise, a
        decision type not allowed, arguments that changed), and, with ``queue=False``,
        ``RunNotResumable`` when this process cannot continue the run (``execute``'s reasons;
        ``agent`` as there), writing nothing.
        """
        run = await self.store.get_run(self.tenant_id, run_id)
        plan = None
        if not queue:
            # Else the run would be left ``running`` with nobody to run it; the plan is kept
            # for the execute that follows (``resume``), so a resume plans its run once.
            plan = await self._continuable(run, agent)
        decisions, forwarded = await self._decide_children(run, decisions)
        tools = None  # for checking an edit: imported only when there is one
        if any(d.type == "edit" for d in decisions.values()):
            tools = plan.tools if plan is not None else await self._tools_of(run, agent)
        ready = RunStatus.QUEUED if queue else RunStatus.RUNNING
        done = await decide_run(
            self.store, self.tenant_id, run_id, decisions, ready=ready, tools=tools
        )
        if plan is not None:
            self._planned[run_id] = plan
        if forwarded:
            done = attrs.evolve(done, recorded=(*forwarded, *done.recorded))
        return done

    async def _decide_children(
        self, run: RunRecord, decisions: Mapping[str, Decision]
    ) -> tuple[dict[str, Decision], tuple[str, ...]]:
        """Forward the decisions about a child run's calls to the child.

        A pending action whose ``request`` holds a ``child_run_id`` (hango-subagents: a
        ``task`` call whose child waits) stands for that child's questions, listed in its
        ``request["pending"]``: decisions naming them are recorded on the child (continued by
        the parent, so never queued), and once the child waits for nothing the parent's action
        is approved. Approving the parent's action itself approves all of them. Returns the
        decisions left for ``run`` and the child calls decided.
        """
        state = run.state if isinstance(run.state, dict) else {}
        if run.status is not RunStatus.SUSPENDED or not state:
            return dict(decisions), ()
        left: dict[str, Decision] = dict(decisions)
        forwarded: list[str] = []
        for action in load_state(state).interrupts.waiting():
            request = action.request
            if not isinstance(request, dict) or "child_run_id" not in request:
                continue
            pending = request.get("pending", ())
            asked = {key for p in pending for key in (p["id"], p["tool_call_id"])}
            mine = {k: d for k, d in left.items() if k in asked}
            whole = left.get(action.id) or left.get(action.tool_call_id)
            if not mine and whole is not None and whole.type == "approve":
                # Approving the delegation itself approves every call its child asks about.
                mine = {p["id"]: Decision.approve() for p in pending}
                left = {k: d for k, d in left.items() if k not in (action.id, action.tool_call_id)}
            if not mine:
                continue
            child = uuid.UUID(request["child_run_id"])
            done = await self.decide(child, mine, queue=False)
            forwarded += done.recorded
            left = {k: d for k, d in left.items() if k not in mine}
            if not done.waiting:
                left[action.id] = Decision.approve()
        return left, tuple(forwarded)

    async def _tools_of(self, run: RunRecord, agent: AgentDefinition | None) -> ToolRegistry | None:
        """The agent's own tools for ``run``; None when this process cannot have them (an
        agent of Python objects it does not hold)."""
        if self.tools is not None:
            return self.tools
        definition = agent or self._live.get(run.id)
        if definition is None:
            record = await self.store.get_agent(self.tenant_id, run.agent_id)
            definition = AgentDefinition.from_json(
                record.definition, source=f"agent {run.agent_id}"
            )
            if not definition.portable:
                return None
        return definition.load_tools()

    async def resume(
        self,
        run_id: uuid.UUID,
        decisions: Mapping[str, Decision] | None = None,
        *,
        emit: Callable[[Event], Awaitable[None]] = _discard,
        agent: AgentDefinition | None = None,
    ) -> RunFinished:
        """Record ``decisions`` (as ``decide``), then continue the run here (``execute``).

        While a pending action still waits for a decision, returns the run as ``suspended``
        with ``pending`` set, executing nothing; when every decision was already recorded and
        the run has finished, returns how it finished. Raises as ``decide`` and ``execute``.
        """
        if decisions:
            done = await self.decide(run_id, decisions, queue=False, agent=agent)
            run = done.run
            if done.waiting:
                return _finished(run, RunStatus.SUSPENDED, done.waiting)
            if not done.recorded and run.status in (RunStatus.COMPLETED, RunStatus.FAILED):
                return _finished(run, run.status, ())
        return await self.execute(run_id, emit=emit, agent=agent)

    @contextlib.asynccontextmanager
    async def stream(self, run_id: uuid.UUID) -> AsyncIterator[AsyncIterator[Event]]:
        """Execute ``run_id`` in a task; yields an async iterator of its events, ending after
        ``RunFinished``. Leaving the block early cancels the run (it is saved as cancelled)."""
        send, receive = anyio.create_memory_object_stream[Event](64)

        async def produce() -> None:
            async with send:
                await self.execute(run_id, emit=send.send)

        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(produce)
            yield receive
            tg.cancel_scope.cancel()

    async def execute(
        self,
        run_id: uuid.UUID,
        *,
        emit: Callable[[Event], Awaitable[None]] = _discard,
        stop: anyio.Event | None = None,
        agent: AgentDefinition | None = None,
        lease: Lease | None = None,
    ) -> RunFinished:
        """Run (or resume) ``run_id`` to its end and return how it finished.

        The stack and model are the ones the run recorded when it started (``model`` /
        ``model_spec`` of this harness override the model). ``agent`` is the agent object the
        run was started with, for a run whose agent holds Python objects and was started by
        another ``Harness`` of this process.

        Raises ``NotFound`` and ``RunNotResumable`` (completed, or a distribution or object it
        needs is missing here), writing nothing. A model error, a malformed stored state, a
        middleware error or content the store cannot hold ends the run as failed (saved, with
        the error; unstorable content is not saved, the last saved state and history are kept).
        Cancellation saves the run as cancelled, then propagates; a save in progress is never
        cut short by it. Once ``stop`` is set, the run ends at the next turn boundary, saved as
        ``queued`` (``run_loop``), for a worker to continue.

        ``lease`` is the worker's (``Worker`` passes it): every save is fenced by it. Writing
        nothing more, ``LeaseLost`` propagates once the lease is lost (another worker owns the
        run), ``StaleVersion`` once another writer saved the run, and ``StoreUnavailable`` when
        the database stayed unreachable (an infrastructure fault, not the run's: it is not
        failed, and a worker leaves it to be reclaimed).

        A run that pauses for a decision ends ``suspended``: its pending actions are saved with
        its history and listed in ``RunFinished.pending``. A suspended run some of whose
        pending actions have no decision yet raises ``RunNotResumable``, writing nothing.

        One executor per run: the run is held under a claim while it executes (``lease``, or
        one taken here, ``hango.run.step``); a run another task, process or worker is executing
        raises ``RunBusy`` (naming it and its holder) before anything runs or is written.
        """
        finished, _ = await self._advance(
            run_id, emit=emit, stop=stop, agent=agent, lease=lease, budget=StepBudget(None)
        )
        return finished

    async def step(
        self,
        run_id: uuid.UUID,
        *,
        steps: int | None = 1,
        lease: Lease | None = None,
        stop: anyio.Event | None = None,
        emit: Callable[[Event], Awaitable[None]] = _discard,
        agent: AgentDefinition | None = None,
    ) -> StepResult:
        """Advance the saved run ``run_id`` by ``steps`` steps (a model turn, or one tool call
        of a batch; ``None``: to its end) and save: the execution seam (``hango.run.step``,
        docs/explanation/execution-seam.md), which ``execute`` and the queue worker use too.

        Idempotent: repeating a step (an engine's retry after a crash or a timeout) goes on
        from the last save, never runs a call whose body returned again, and answers a
        non-idempotent call whose outcome is unknown as such instead of running it. A run that
        has completed, or waits for decisions, is reported as it stands (``steps`` 0), writing
        nothing. Fenced: the run is held under a claim (``lease``, a worker's, or one taken
        here); every save carries its token.

        Returns a ``StepResult`` (``more``: another step advances it). Raises as ``execute``
        does, except for the two cases above: ``RunBusy`` (another executor holds the run),
        ``NotFound``, ``RunNotResumable`` (what the run needs is missing here), ``LeaseLost``,
        ``StaleVersion``, ``StoreUnavailable``, ``ValueError`` for ``steps`` below 1.
        """
        budget = StepBudget(steps)
        finished, settled = await self._advance(
            run_id, emit=emit, stop=stop, agent=agent, lease=lease, budget=budget, settle=True
        )
        return StepResult.of(finished, 0 if settled else budget.taken)

    async def _advance(
        self,
        run_id: uuid.UUID,
        *,
        emit: Callable[[Event], Awaitable[None]],
        stop: anyio.Event | None,
        agent: AgentDefinition | None,
        lease: Lease | None,
        budget: StepBudget,
        settle: bool = False,
    ) -> tuple[RunFinished, bool]:
        """Execute ``run_id`` under its claim until ``budget`` runs out or the run ends; with
        ``settle``, a completed run or one waiting for decisions is returned as it stands
        (second value True) instead of raising ``RunNotResumable``."""
        run = await self.store.get_run(self.tenant_id, run_id)
        if run.status is RunStatus.COMPLETED:
            if settle:
                return _finished(run, run.status, ()), True
            raise RunNotResumable(f"run {run_id} already completed")
        if waiting := _waiting(run):
            if settle:
                return _finished(run, run.status, waiting), True
            # Refused before the claim: trying to execute it writes nothing.
            raise RunNotResumable(
                f"run {run_id} is suspended, waiting for a decision on tool call(s) "
                f"{', '.join(p.tool_call_id for p in waiting)} (hango resume RUN_ID --approve "
                "CALL_ID, or Harness.decide)"
            )
        plan = await self._continuable(run, agent)
        self._planned.pop(run_id, None)  # one plan per execute: the next one plans again
        async with claimed(
            self.store,
            self.tenant_id,
            run_id,
            lease=lease,
            owner=lease.owner if lease is not None else executor_name(),
            lease_seconds=self.lease_seconds,
        ) as held:
            # As the claim found it: another executor may have saved it since the read above.
            run = await self.store.get_run(self.tenant_id, run_id)
            if run.status is RunStatus.COMPLETED:
                if settle:
                    return _finished(run, run.status, ()), True
                raise RunNotResumable(f"run {run_id} already completed")
            return await self._pass(
                run, plan, held, emit=emit, stop=stop, budget=budget, settle=settle
            )

    async def _pass(
        self,
        run: RunRecord,
        plan: RunPlan,
        lease: Lease,
        *,
        emit: Callable[[Event], Awaitable[None]],
        stop: anyio.Event | None,
        budget: StepBudget,
        settle: bool,
    ) -> tuple[RunFinished, bool]:
        """One pass over ``run``, held under ``lease``: load, loop, save at every boundary."""
        run_id = run.id
        # Not ``version > 0``: a claim increments the version before the run has executed.
        # The first checkpoint always writes the state, so ``{}`` means "never ran".
        resumed = run.state != {}
        agent = plan.agent
        saver = Saver(self.store, run, lease)
        previous = None if resumed else await _previous_state(self.store, run)
        try:
            state = _initial_state(run, previous, plan.session_scoped)
        except StateError as exc:
            # Keep the stored state as it is: the run fails, nothing is lost.
            await saver.mark_failed(str(exc))
            finished = RunFinished(run_id, RunStatus.FAILED, None, str(exc), Usage())
            await emit(finished)
            return finished, False
        waiting = state.interrupts.waiting()
        if run.status is RunStatus.SUSPENDED and waiting:
            if settle:
                return _finished(run, run.status, waiting), True
            raise RunNotResumable(
                f"run {run_id} is suspended, waiting for a decision on tool call(s) "
                f"{', '.join(p.tool_call_id for p in waiting)} (hango resume RUN_ID --approve "
                "CALL_ID, or Harness.decide)"
            )
        # From the session's history mark (a compaction's), but never after the run's own
        # prompt: the loop counts the run's turns from it.
        start = min(state.history_mark.index, run.message_start)
        state.messages = await self.store.load_messages(self.tenant_id, run.session_id, start=start)
        state.history_start = saver.start = start
        saver.saved = list(state.messages)

        async def checkpoint(_: State) -> None:
            await saver.save(state, RunStatus.RUNNING)

        # The store is bound for the run's middlewares and tools (workspace files).
        with (
            bound_store(self.store),
            _executing(self),
            telemetry.tracer.start_as_current_span(
                f"invoke_agent {agent.name}",
                kind=SpanKind.INTERNAL,
                attributes={
                    telemetry.OPERATION_NAME: "invoke_agent",
                    telemetry.AGENT_NAME: agent.name,
                    telemetry.AGENT_ID: str(run.agent_id),
                    telemetry.CONVERSATION_ID: str(run.session_id),
                    telemetry.RUN_ID: str(run_id),
                },
            ) as span,
            memory_of_run(self.store, agent.name),
        ):  # hango.middleware.run_memory()
            try:
                chain = plan.chain
                span.add_event(
                    telemetry.MIDDLEWARE_STACK, {telemetry.MIDDLEWARE_NAMES: chain.names}
                )
                model = plan.build_model()
                # The provider's model name (spans, requests), not the agent's spec.
                model_name = getattr(model, "name", agent.model_spec)
                spans.agent_model(span, spans.model_attributes(model), model_name)
                view = plan.tools.view(agent.tool_allowlist)
                await emit(RunStarted(run_id, run.session_id, resumed))
                await _first_checkpoint(state, chain, checkpoint)
                outcome = await run_loop(
                    state,
                    chain=chain,
                    model=model,
                    view=view,
                    settings=LoopSettings(
                        model_name,
                        agent.system_blocks,
                        agent.max_turns,
                        agent.max_tokens,
                        tool_choice=agent.tool_choice,
                        parallel_tool_calls=agent.parallel_tool_calls,
                        server_tools=agent.server_tools,
                        max_result_chars=self.max_result_chars,
                        output_schema=agent.output_json_schema,
                        output_strategy=agent.output_strategy,
                        output_type=agent.output_type,
                        output_retries=agent.output_retries,
                        # A step is one tool call: a pass of limited steps runs its batch
                        # one call at a time (docs/explanation/execution-seam.md).
                        max_tool_concurrency=(
                            agent.max_tool_concurrency if budget.limit is None else 1
                        ),
                        sequential_tools=agent.sequential_tools,
                        tool_timeout=agent.tool_timeout,
                        tool_timeouts=agent.tool_timeouts,
                    ),
                    emit=emit,
                    checkpoint=checkpoint,
                    stop=stop,
                    step_done=budget,
                )
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    cancelled = LoopOutcome(RunStatus.CANCELLED, None, "cancelled", Usage(), 0)
                    await saver.finish(state, cancelled)
                raise
            except (StaleVersion, LeaseLost, StoreUnavailable):
                # Another writer owns the run now, or the database is away: not the run's
                # fault, and any further write would be refused or lost.
                raise
            except (Exception, Interrupt) as exc:
                if isinstance(exc, Interrupt):
                    exc = misplaced(exc)
                telemetry.mark_error(span, exc)
                error = (
                    str(exc)
                    if isinstance(
                        exc, ModelError | StateError | MiddlewareError | UnstorableContent
                    )
                    else (f"{type(exc).__name__}: {exc}")
                )
                failed = LoopOutcome(RunStatus.FAILED, None, error, Usage(), 0)
                with anyio.CancelScope(shield=True):
                    outcome = await saver.finish(state, failed)
            else:
                outcome = await saver.finish(state, outcome)
            spans.agent_finished(span, outcome.usage, state.messages[run.message_start - start :])
            suspended = outcome.status is RunStatus.SUSPENDED
            finished = RunFinished(
                run_id,
                outcome.status,
                outcome.stop_reason,
                outcome.error,
                state.usage,
                tuple(state.interrupts.waiting()) if suspended else (),
                output=outcome.output if outcome.status is RunStatus.COMPLETED else None,
            )
            await emit(finished)
            return finished, False


async def _first_checkpoint(
    state: State, chain: Chain, checkpoint: Callable[[State], Awaitable[None]]
) -> None:
    """Run the ``before_run`` hooks, then make the run's first save.

    One save, not one before the hooks and one after: until it, the run did nothing a new
    execution would not do again alike (its state comes from the records alone, and the
    hooks run again), so a save before the hooks would record nothing durable. When the
    hooks left a state that cannot be saved, the state from before them is saved first, so
    the run fails keeping a valid document, then the error propagates."""
    private, todos = dict(state.private), state.todos
    await chain.before_run(state)
    try:
        await checkpoint(state)
    except (StateError, UnstorableContent):
        after = dict(state.private), state.todos
        state.private.clear()
        state.private.update(private)
        state.todos = todos
        await checkpoint(state)
        state.private.clear()
        state.private.update(after[0])
        state.todos = after[1]
        raise


def _check_tools(agent: AgentDefinition, registry: ToolRegistry, chain: Chain) -> None:
    """Tool names are unique across the agent and its plugins (``AgentFileError`` otherwise,
    before the run is recorded); every ``ToolChecker`` middleware checks the tool names its
    options give (``ConfigError``); an allowlisted name that no tool answers to is an
    ``AllowlistWarning`` (a typo, or a plugin that is not installed: the agent still runs,
    without that tool)."""
    probe = State(DEFAULT_TENANT, DEFAULT_TENANT, DEFAULT_TENANT, DEFAULT_TENANT)
    names = [t.spec.name for t in registry.view()]
    for t in chain.tools(probe):
        if t.spec.name in names:
            raise AgentFileError(
                f"agent {agent.name!r}: a plugin's tool {t.spec.name!r} has the name of one of "
                "the agent's tools; rename the agent's"
            )
        names.append(t.spec.name)
    for mw in chain.middlewares:
        if isinstance(mw, ToolChecker):
            mw.check_tools(frozenset(names))
    unknown = sorted(set(agent.tool_allowlist or ()) - set(names))
    if unknown:
        warnings.warn(
            f"{agent.label}: tool_allowlist names tools nothing provides: "
            f"{', '.join(unknown)} (available: {', '.join(names) or 'none'}); is the plugin "
            "providing them installed?",
            AllowlistWarning,
            stacklevel=3,
        )


def _finished(run: RunRecord, status: RunStatus, pending: Sequence[PendingAction]) -> RunFinished:
    """How a run stands, from its record (for a resume that executed nothing)."""
    saved = load_state(run.state) if isinstance(run.state, dict) and run.state else None
    usage = saved.usage if saved is not None else Usage()
    output = saved.output if saved is not None and status is RunStatus.COMPLETED else None
    return RunFinished(
        run.id, status, run.stop_reason, run.error, usage, tuple(pending), output=output
    )


def _waiting(run: RunRecord) -> list[PendingAction]:
    """The pending actions a suspended run waits for, from its record (none: it is not
    suspended, or its state does not load, which the pass itself reports)."""
    if run.status is not RunStatus.SUSPENDED or not isinstance(run.state, dict):
        return []
    try:
        state = load_run_state(
            run.state, run_id=run.id, session_id=run.session_id, tenant_id=run.tenant_id
        )
    except StateError:
        return []
    return state.interrupts.waiting()


def _initial_state(run: RunRecord, previous: JSON | None, session_scoped: frozenset[str]) -> State:
    """A resumed run's own saved state, or a new run's (``new_run_state``); ``StateError``."""
    if run.state == {}:
        return new_run_state(
            previous,
            run_id=run.id,
            session_id=run.session_id,
            agent_id=run.agent_id,
            tenant_id=run.tenant_id,
            session_scoped=session_scoped,
        )
    return load_run_state(
        run.state, run_id=run.id, session_id=run.session_id, tenant_id=run.tenant_id
    )


async def _previous_state(store: RunStore, run: RunRecord) -> JSON | None:
    """The saved state of the run before ``run`` in its session (a session runs one run at a
    time, so ``run`` is the newest), or None."""
    for other in await store.list_runs(run.tenant_id, session_id=run.session_id, limit=2):
        if other.id != run.id:
            return other.state
    return None
