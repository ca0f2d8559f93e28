"""A run is planned once: ``RunPlan`` is everything a run is built from, made by ``Planner``.

The plan of a new run is made by ``Harness.start`` and handed to ``execute`` in the same
process; a run continued elsewhere (``hango resume``, a worker) gets one plan per execute, made
from what the run recorded. Making a plan asks each plugin's ``hango_middleware`` hook once,
imports the agent's tools once and builds one chain; nothing downstream rebuilds any of it
(docs/explanation/run-plan.md says why it is one value).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import frozen

from hango.agent.chain import Chain
from hango.agent.definition import AgentDefinition
from hango.agent.middleware import Middleware
from hango.agent.stack import IN_PROCESS, Placement, in_process
from hango.agent.state import session_scoped
from hango.config import StackConfig
from hango.discovery import check_options, discover, option_schemas, resolve_stack
from hango.plugins import PluginManager
from hango.provider.model import Model
from hango.store.base import RunRecord, StoreError
from hango.tool.registry import ToolRegistry

StackFactory = Callable[[StackConfig], Sequence[Middleware]]


class RunNotResumable(StoreError):
    """The run cannot be continued here, and nothing was written: it has completed, or it
    needs what this process lacks (a plugin's distribution, an object given in Python). The
    message says which."""


@frozen
class ModelChoice:
    """Which model a run calls: ``override`` (an object given to the harness) if set, else
    the model named by ``spec`` and ``base_url`` (``--model``, or the spec the run recorded),
    else the agent's own. Built only when the run executes (``RunPlan.build_model``), so
    queueing a run needs no provider credentials."""

    override: Model | None = None
    spec: str | None = None
    base_url: str | None = None


@frozen
class RunPlan:
    """What one run is built from, decided once.

    ``agent``: the agent definition. ``stack``: the placed middlewares in chain order.
    ``options``: the ``StackConfig`` the plugins built them from (the agent's validated
    ``[options.*]`` tables, its allowlist, the settings). ``tools``: the agent's tools,
    imported. ``chain``: the one chain of the run. ``model``: which model it calls.
    ``settings``: the ``HANGO_*`` settings everything of the run reads (plugins, model
    selection), never the process environment unless the harness was given none.
    """

    agent: AgentDefinition
    stack: tuple[Placement, ...]
    options: StackConfig
    tools: ToolRegistry
    chain: Chain
    model: ModelChoice
    settings: Mapping[str, str]

    @property
    def session_scoped(self) -> frozenset[str]:
        """Middlewares whose private state carries over to the session's next run."""
        return session_scoped(p.middleware for p in self.stack)

    def record(self) -> dict[str, Any]:
        """What a new run records of its plan (``RunRecord.config`` without ``queued``):
        the stack with distributions and versions, the model spec and base URL."""
        return {
            "stack": [p.record() for p in self.stack],
            "model": self.model.spec or self.agent.model_spec,
            "base_url": self.model.base_url or self.agent.base_url,
        }

    def build_model(self) -> Model:
        """The model object; ``ModelSpecError`` for a bad spec or missing credentials,
        ``ConfigError`` for a bad ``HANGO_MODEL_RETRIES`` in the plan's settings."""
        if self.model.override is not None:
            return self.model.override
        return self.agent.build_model(self.model.spec, self.model.base_url, settings=self.settings)


class Planner:
    """Makes the ``RunPlan`` of a new run (``new``) or of a recorded one (``recorded``).

    ``settings``: the ``HANGO_*`` settings; ``plugins``: a callable giving the plugin manager
    (loaded once, on first use); ``middleware``: objects for every agent's ``agent`` slot;
    ``stack``: a factory replacing the whole stack (tests); ``tools``: a registry replacing the
    agent's tools; ``model`` / ``model_spec`` / ``base_url``: the harness's model override.
    """

    def __init__(
        self,
        *,
        settings: Mapping[str, str],
        plugins: Callable[[], PluginManager],
        middleware: Sequence[Middleware] = (),
        stack: StackFactory | None = None,
        tools: ToolRegistry | None = None,
        model: Model | None = None,
        model_spec: str | None = None,
        base_url: str | None = None,
    ) -> None:
        self.settings = settings
        self._plugins = plugins
        self.middleware: tuple[Middleware, ...] = tuple(middleware)
        self.custom_stack = stack
        self.tools = tools
        self.model = model
        self.model_spec = model_spec
        self.base_url = base_url
        # The plugins' option schemas do not change while the manager lives: read once.
        self._schemas: dict[str, tuple[Mapping[str, Any], str]] | None = None

    @property
    def plugins(self) -> PluginManager:
        return self._plugins()

    def stack_config(self, agent: AgentDefinition) -> StackConfig:
        """What plugins build a run's middlewares from; the agent's ``[options.*]`` tables are
        validated here (``ConfigError`` naming the table and field)."""
        if agent.options and self._schemas is None:
            self._schemas = option_schemas(self.plugins)
        check_options(agent.options, self.plugins, source=agent.label, schemas=self._schemas)
        allowlist = agent.tool_allowlist
        return StackConfig(
            tool_allowlist=None if allowlist is None else frozenset(allowlist),
            settings=self.settings,
            agent_middleware=agent.middleware_names,
            middleware_options=agent.options,
            source=agent.label,
            base_dir=agent.base_dir,
        )

    def installed(self) -> frozenset[str]:
        """The middleware names this planner can build: what the installed plugins provide,
        and the objects it was given (asks the hook; a worker asks once, when it starts)."""
        if self.custom_stack is not None:
            config = StackConfig(settings=self.settings)
            return frozenset(m.name for m in self.custom_stack(config))
        provided = discover(StackConfig(settings=self.settings), self.plugins)
        return frozenset({p.name for p in provided} | {m.name for m in self.middleware})

    def new(self, agent: AgentDefinition) -> RunPlan:
        """The plan of a new run of ``agent``. Raises ``AgentFileError`` (a tool path does not
        import), ``ConfigError`` (an agent middleware, an ``[options.*]`` table or a plugin
        setting is invalid) or ``PluginError``."""
        tools = self._tools(agent)
        config = self.stack_config(agent)
        if self.custom_stack is not None:
            stack = [in_process(m) for m in self.custom_stack(config)]
        else:
            objects = (*agent.middleware_objects, *self.middleware)
            stack = resolve_stack(config, self.plugins, objects=objects)
        model = ModelChoice(self.model, self.model_spec, self.base_url)
        return self._plan(agent, stack, config, tools, model)

    def recorded(self, run: RunRecord, agent: AgentDefinition) -> RunPlan:
        """The plan to continue ``run`` with: exactly the stack it recorded (a run recorded
        before stacks were: the current one) and the model it started with, unless this
        planner overrides it. Raises ``RunNotResumable`` naming what is missing here, and
        what ``new`` raises."""
        recorded = run.config.get("stack")
        if recorded is None:
            return self.new(agent)
        objects = (*agent.middleware_objects, *self.middleware)
        # Before the agent's options are checked (and the hook is asked): a missing plugin is
        # the news, not the table it would have read.
        self._check_present(run, recorded, {m.name for m in objects})
        tools = self._tools(agent)
        config = self.stack_config(agent)
        available: dict[str, Placement]
        if self.custom_stack is not None:
            available = {m.name: in_process(m) for m in self.custom_stack(config)}
        else:
            available = {p.name: p for p in discover(config, self.plugins)}
            for mw in objects:
                available[mw.name] = in_process(mw)
        stack: list[Placement] = []
        for entry in recorded:
            placement = available.get(entry["name"])
            if placement is None:
                raise RunNotResumable(_missing(run, entry))
            stack.append(placement)
        return self._plan(agent, stack, config, tools, self._model_of(run, agent))

    def _check_present(
        self, run: RunRecord, recorded: Sequence[Mapping[str, str]], objects: set[str]
    ) -> None:
        if self.custom_stack is not None:
            return  # the factory's names are known once it is called, after the options
        pm = self.plugins
        here = {pm.distribution_of(name)[0] for name, _ in pm.list_name_plugin()}
        for entry in recorded:
            dist = entry.get("distribution", "")
            if entry["name"] in objects:
                continue
            if dist == IN_PROCESS or dist not in here:
                raise RunNotResumable(_missing(run, entry))

    def _model_of(self, run: RunRecord, agent: AgentDefinition) -> ModelChoice:
        if self.model is not None or self.model_spec is not None:
            return ModelChoice(self.model, self.model_spec, self.base_url)
        spec = run.config.get("model")
        if spec is None or not isinstance(agent.model, str):
            return ModelChoice()
        return ModelChoice(None, spec, run.config.get("base_url"))

    def _tools(self, agent: AgentDefinition) -> ToolRegistry:
        return self.tools if self.tools is not None else agent.load_tools()

    def _plan(
        self,
        agent: AgentDefinition,
        stack: Sequence[Placement],
        config: StackConfig,
        tools: ToolRegistry,
        model: ModelChoice,
    ) -> RunPlan:
        # Origins name a failing middleware's distribution in its MiddlewareError.
        chain = Chain.build(
            [p.middleware for p in stack], origins={p.name: p.origin for p in stack}
        )
        return RunPlan(agent, tuple(stack), config, tools, chain, model, self.settings)


def _missing(run: RunRecord, entry: Mapping[str, str]) -> str:
    name, dist = entry["name"], entry.get("distribution", "")
    if dist == IN_PROCESS:
        return (
            f"run {run.id} was started with middleware {name!r} given as a Python object; "
            "only a process holding it (Harness(middleware=[...])) can continue the run"
        )
    return (
        f"run {run.id} was started with middleware {name!r} from distribution {dist} "
        f"{entry.get('version', '')}, which is not installed here; install it, or continue "
        "the run where it is"
    )
