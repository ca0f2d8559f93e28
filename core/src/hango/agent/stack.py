"""The pinned stack: the one place the order of the middleware chain is decided.

Plugins only say WHICH middlewares exist (hook ``hango_middleware``); ``STACK_ORDER`` says where
each one sits. Installing or removing a plugin fills or empties a slot and never moves another.
The one slot that holds more than one middleware is ``agent``: the agent file's own
``middleware = [...]`` list, in the agent's order (docs/system-architecture.md says why it sits
where it does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
from attrs import field, frozen

from hango.agent.middleware import Middleware, capabilities
from hango.config import ConfigError
from hango.plugins import PluginError, PluginManager, make_plugin_manager

#: The slot filled by the agent's own middlewares (agent file ``middleware = [...]``, or objects
#: given in Python), in the agent's order.
AGENT_SLOT = "agent"

#: Distribution recorded for a middleware given as a Python object rather than by a plugin: a
#: run with one can only be executed by the process that holds the object.
IN_PROCESS = "<in-process>"

STACK_ORDER: tuple[str, ...] = (
    # Skills load instructions and tools first so everything after sees them as agent tools.
    "skills",
    # Filesystem offloads large tool results to files before anything measures history.
    "filesystem",
    # Sub-agents are tools; they sit outside the history-shaping middlewares below.
    "subagent",
    # Summarization after filesystem, so it summarises already-offloaded results.
    "summarization",
    # Repair runs before anything reads history, so every later hook sees a valid history.
    "repair_tool_calls",
    # Planning: write_todos and the plan block, before the prompt-cache breakpoint so the
    # plan is part of the system prompt the model always sees.
    "todo",
    # Repeat-call detection wraps tool calls outside the approval gate, so a blocked repeat
    # never asks a human (and is not counted by the budgets below).
    "repeat_call",
    # Budgets count the calls the run makes, outside the agent's own wrappers, so no user
    # middleware can make a call the budget does not see; a refused call never reaches the
    # approval gate.
    "limits",
    # The agent's own middlewares: after history shaping, planning and the repeat detector
    # (they see a valid history and the plan), before the prompt cache (their static system
    # blocks sit in the cached prefix), before memory (which still lands after the
    # breakpoint), and outside approval and the allowlist (a user's wrapper cannot bypass
    # either).
    AGENT_SLOT,
    # Fallback swaps the model for one call; outside the prompt cache, which decides its
    # provider-specific request parts from the model actually called.
    "model_fallback",
    # Prompt cache before memory: memory's blocks land after the breakpoint, so memory edits
    # do not invalidate the cached prefix.
    "prompt_cache",
    "memory",
    # Approval wraps the actual execution, after every middleware that may short-circuit.
    "human_in_the_loop",
    # Tool retry inside approval: a retried attempt re-runs an approved call without asking
    # again, and one approval is consumed once.
    "tool_retry",
    # Allowlist last (innermost): nothing inside it can re-add a banned tool or call one.
    "tool_allowlist",
)
_SLOT = {name: i for i, name in enumerate(STACK_ORDER)}


@frozen
class StackConfig:
    """What plugins build their middleware from.

    ``tool_allowlist``: the agent's effective allowlist (None = every tool). ``settings``: the
    ``HANGO_*`` settings (name -> raw string), deployment-wide defaults. ``agent_middleware``:
    the names of the agent file's ``middleware`` list, in order. ``middleware_options``: the
    agent file's ``[options.<name>]`` tables, already validated against each plugin's schema;
    read one with ``options(name)``. ``source`` names the agent in error messages.
    ``base_dir`` is the agent file's folder, which relative paths in options (a
    ``scripted:PATH`` model spec) resolve against; None resolves them against the working
    directory.
    """

    tool_allowlist: frozenset[str] | None = None
    settings: Mapping[str, str] = field(factory=dict)
    agent_middleware: tuple[str, ...] = ()
    middleware_options: Mapping[str, Mapping[str, Any]] = field(factory=dict)
    source: str = field(default="agent", eq=False)
    base_dir: str | None = None

    def options(self, name: str) -> Mapping[str, Any]:
        """Middleware ``name``'s ``[options.<name>]`` table from the agent file (``{}`` when
        absent). A setting given here wins over the ``HANGO_*`` default."""
        return self.middleware_options.get(name, {})


@frozen
class Placement:
    """One discovered middleware: where it came from and its slot.

    ``slot`` is its index in ``STACK_ORDER`` (the ``agent`` slot's for a middleware the agent
    lists), or None for a name outside ``STACK_ORDER`` that this agent does not list: it is
    available to agents, and inactive.
    """

    middleware: Middleware
    plugin: str
    distribution: str
    version: str
    slot: int | None

    @property
    def name(self) -> str:
        return self.middleware.name

    @property
    def capabilities(self) -> tuple[str, ...]:
        return capabilities(self.middleware)

    @property
    def origin(self) -> str:
        """Where it came from, for errors: ``plugin todo (distribution hango-todo 0.1.0)``."""
        if self.distribution == IN_PROCESS:
            return "an in-process object"
        return f"plugin {self.plugin} (distribution {self.distribution} {self.version})".rstrip()

    def record(self) -> dict[str, str]:
        """What a run records of it: ``{"name", "distribution", "version"}``."""
        return {"name": self.name, "distribution": self.distribution, "version": self.version}


def in_process(middleware: Middleware) -> Placement:
    """A middleware object given in Python, placed in the ``agent`` slot."""
    return Placement(middleware, IN_PROCESS, IN_PROCESS, "", _SLOT[AGENT_SLOT])


def _provided(pm: PluginManager, config: StackConfig) -> list[tuple[Middleware, str, str, str]]:
    """``(middleware, plugin, distribution, version)`` for everything the plugins provide.

    Raises ``PluginError`` naming the plugin and its distribution when its hook raises or
    returns something that is not a middleware (an object with a non-empty ``str`` name).
    """
    out: list[tuple[Middleware, str, str, str]] = []
    for impl in pm.hook.hango_middleware.get_hookimpls():
        dist, version = pm.distribution_of(impl.plugin_name)
        where = f"plugin {impl.plugin_name!r} ({pm.entry_point_of(impl.plugin_name)}) from {dist}"
        try:
            provided: Any = impl.function(config=config)
        except ConfigError:
            raise  # already names the setting at fault
        except Exception as exc:
            raise PluginError(
                f"{where}: hango_middleware raised {type(exc).__name__}: {exc}"
            ) from exc
        if provided is None:
            continue
        items = list(provided) if isinstance(provided, list | tuple) else [provided]
        for mw in items:
            name = getattr(mw, "name", None)
            if not isinstance(name, str) or not name:
                raise PluginError(
                    f"{where}: hango_middleware returned {mw!r}, which is not a middleware "
                    "(an object with a non-empty str `name`)"
                )
            if name == AGENT_SLOT:
                raise PluginError(
                    f"{where}: a middleware cannot be named {AGENT_SLOT!r}: that slot holds the "
                    "middlewares an agent lists"
                )
            out.append((mw, impl.plugin_name, dist, version))
    return out


def discover(config: StackConfig, plugins: PluginManager | None = None) -> list[Placement]:
    """Every middleware the installed plugins provide for ``config``, in chain order, the
    inactive ones (available to agents, not listed by this one) last by name.

    Raises ``PluginError`` when two plugins provide the same name or a plugin's hook fails.
    """
    pm = plugins if plugins is not None else make_plugin_manager(env=config.settings)
    listed = {name: i for i, name in enumerate(config.agent_middleware)}
    found: dict[str, Placement] = {}
    for mw, plugin, dist, version in _provided(pm, config):
        if mw.name in found:
            other = found[mw.name]
            raise PluginError(
                f"middleware {mw.name!r} is provided by two plugins: "
                f"{other.plugin} (distribution {other.distribution}) and "
                f"{plugin} (distribution {dist})"
            )
        slot = _SLOT.get(mw.name)
        if slot is None and mw.name in listed:
            slot = _SLOT[AGENT_SLOT]
        found[mw.name] = Placement(mw, plugin, dist, version, slot)

    def key(p: Placement) -> tuple[bool, int, int, str]:
        return (p.slot is None, p.slot or 0, listed.get(p.name, 0), p.name)

    return sorted(found.values(), key=key)


def resolve_stack(
    config: StackConfig,
    plugins: PluginManager | None = None,
    *,
    objects: Sequence[Middleware] = (),
) -> list[Placement]:
    """The run's stack in chain order: pinned slots filled by the installed plugins, and the
    ``agent`` slot filled by ``config.agent_middleware`` (by name) then ``objects`` (middleware
    given in Python), in that order.

    Raises ``ConfigError`` naming the middleware when a listed name is a pinned slot, is listed
    twice, or is provided by no installed plugin, and when an object's name is taken; raises
    ``PluginError`` as ``discover`` does.
    """
    pm = plugins if plugins is not None else make_plugin_manager(env=config.settings)
    _check_listed(config)
    placements = discover(config, pm)
    provided = {p.name for p in placements}
    missing = [n for n in config.agent_middleware if n not in provided]
    if missing:
        available = sorted(p.name for p in placements if p.slot is None)
        raise ConfigError(
            f"{config.source}: middleware {missing[0]!r} is not provided by any installed "
            f"plugin (available to agents: {', '.join(available) or 'none'})"
        )
    stack = [p for p in placements if p.slot is not None]
    taken = {p.name for p in stack}
    extra: list[Placement] = []
    for mw in objects:
        if mw.name in _SLOT or mw.name in taken:
            raise ConfigError(
                f"{config.source}: middleware object {mw!r} is named {mw.name!r}, "
                "which is already a slot or a middleware of this stack; give it its own name"
            )
        taken.add(mw.name)
        extra.append(in_process(mw))
    agent_end = max(
        (i for i, p in enumerate(stack) if (p.slot or 0) <= _SLOT[AGENT_SLOT]), default=-1
    )
    return [*stack[: agent_end + 1], *extra, *stack[agent_end + 1 :]]


def _check_listed(config: StackConfig) -> None:
    seen: set[str] = set()
    for name in config.agent_middleware:
        if name in _SLOT:
            raise ConfigError(
                f"{config.source}: middleware {name!r} is a pinned slot of STACK_ORDER; "
                "its plugin fills it when installed, so do not list it"
            )
        if name in seen:
            raise ConfigError(f"{config.source}: middleware {name!r} is listed twice")
        seen.add(name)


def default_stack(config: StackConfig, plugins: PluginManager | None = None) -> list[Middleware]:
    """The run's middlewares in chain order (``resolve_stack``); empty slots are skipped,
    inactive names dropped.

    The same config and the same installed plugins give the same chain whatever the order of
    registration or discovery. An empty list is the plain loop. Without ``plugins``, the
    plugin manager is made from ``config.settings`` (so its ``HANGO_DISABLE_PLUGINS`` counts,
    not the process environment's).
    """
    return [p.middleware for p in resolve_stack(config, plugins)]


def option_schemas(plugins: PluginManager) -> dict[str, tuple[Mapping[str, Any], str]]:
    """Middleware name -> (JSON Schema of its ``[options.<name>]`` table, the plugin that
    declared it), from every ``hango_options_schema`` implementation."""
    out: dict[str, tuple[Mapping[str, Any], str]] = {}
    for impl in plugins.hook.hango_options_schema.get_hookimpls():
        dist, _ = plugins.distribution_of(impl.plugin_name)
        declared: Any = impl.function()
        for name, schema in (declared or {}).items():
            out[name] = (schema, f"plugin {impl.plugin_name} (distribution {dist})")
    return out


def check_options(
    options: Mapping[str, Any], plugins: PluginManager, *, source: str = "agent"
) -> None:
    """Validate the agent's ``[options.<name>]`` tables against each plugin's JSON Schema
    (draft 2020-12, the library agent files use).

    Raises ``ConfigError`` naming ``source``, the table and the field: a table for a middleware
    that declares no options (or that no installed plugin provides), or a value the schema
    refuses; ``PluginError`` naming the plugin when its schema is not valid JSON Schema.
    """
    if not options:
        return
    schemas = option_schemas(plugins)
    for name, table in options.items():
        if name not in schemas:
            known = ", ".join(sorted(schemas)) or "none"
            raise ConfigError(
                f"{source}: [options.{name}]: no installed middleware named {name!r} takes "
                f"options (middlewares with options: {known})"
            )
        schema, plugin = schemas[name]
        validator_cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        try:
            validator_cls.check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            # The plugin's fault, not the agent file's: name the plugin, not a field.
            raise PluginError(
                f"{source}: [options.{name}] cannot be checked: {plugin} declares a schema "
                f"that is not JSON Schema: {e.message}"
            ) from None
        error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(table))
        if error is not None:
            # absolute_path: inside an anyOf, ``path`` is relative to the branch that failed.
            where = error.absolute_path
            field_path = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in where)
            raise ConfigError(
                f"{source}: [options.{name}]{field_path}: {error.message} (schema of {plugin})"
            )
