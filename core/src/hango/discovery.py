"""What the installed plugins provide for a run: middlewares placed in the slots of
``STACK_ORDER``, and the JSON Schemas of their ``[options.<name>]`` tables.

``discover`` asks every plugin's ``hango_middleware`` hook and places what it returns;
``resolve_stack`` adds the agent's own middlewares (by name and as Python objects) in the
``agent`` slot; ``check_options`` validates an agent's option tables against the plugins'
schemas. The order itself is decided in ``hango.agent.stack``, never here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import jsonschema

from hango.agent.middleware import Middleware
from hango.agent.stack import AGENT_SLOT, SLOT, Placement, in_process
from hango.config import ConfigError, StackConfig
from hango.plugins import (
    DISABLE_VARIABLE,
    PluginError,
    PluginManager,
    PluginWarning,
    make_plugin_manager,
)


def _provided(pm: PluginManager, config: StackConfig) -> list[tuple[Middleware, str, str, str]]:
    """``(middleware, plugin, distribution, version)`` for everything the plugins provide.

    A plugin whose hook raises or returns something that is not a middleware (an object with
    a non-empty ``str`` name) is left out and recorded in ``pm.failures``.
    """
    out: list[tuple[Middleware, str, str, str]] = []
    for impl in pm.hook.hango_middleware.get_hookimpls():
        dist, version = pm.distribution_of(impl.plugin_name)
        try:
            provided: Any = impl.function(config=config)
        except ConfigError:
            raise  # already names the setting at fault
        except Exception as exc:
            pm.fail(impl.plugin_name, f"hango_middleware raised {type(exc).__name__}: {exc}")
            continue
        items = [] if provided is None else (
            list(provided) if isinstance(provided, list | tuple) else [provided]
        )  # fmt: skip
        fault = next((_fault(mw) for mw in items if _fault(mw)), None)
        if fault is not None:
            pm.fail(impl.plugin_name, fault)
            continue
        out += [(mw, impl.plugin_name, dist, version) for mw in items]
    return out


def _fault(mw: Any) -> str | None:
    """Why ``mw`` (returned by a ``hango_middleware`` hook) cannot be placed, or None."""
    name = getattr(mw, "name", None)
    if not isinstance(name, str) or not name:
        return (
            f"hango_middleware returned {mw!r}, which is not a middleware "
            "(an object with a non-empty str `name`)"
        )
    if name == AGENT_SLOT:
        return (
            f"a middleware cannot be named {AGENT_SLOT!r}: that slot holds the middlewares an "
            "agent lists"
        )
    return None


def failed_plugins(pm: PluginManager) -> str:
    """The failed plugins as one clause for an error message ('' when none failed)."""
    if not pm.failures:
        return ""
    return "; plugins that failed: " + "; ".join(pm.failures.values())


def discover(config: StackConfig, plugins: PluginManager | None = None) -> list[Placement]:
    """Every middleware the installed plugins provide for ``config``, in chain order, the
    inactive ones (available to agents, not listed by this one) last by name.

    Middlewares named in ``HANGO_DISABLE_PLUGINS`` are left out, and a name there that is
    neither an entry point nor a provided middleware is warned about (``PluginWarning``), as is
    every plugin that failed (``pm.failures``: left out, blocking only the agents that need it).
    Raises ``PluginError`` when two plugins provide the same name.
    """
    pm = plugins if plugins is not None else make_plugin_manager(env=config.settings)
    listed = {name: i for i, name in enumerate(config.agent_middleware)}
    found: dict[str, Placement] = {}
    provided = _provided(pm, config)
    unknown = sorted(pm.blocked_middleware - {mw.name for mw, *_ in provided})
    if unknown:
        warnings.warn(
            f"{DISABLE_VARIABLE} names no installed plugin or middleware: {', '.join(unknown)} "
            f"(installed: {', '.join(sorted(pm.installed)) or 'none'})",
            PluginWarning,
            stacklevel=2,
        )
    for failure in pm.failures.values():
        warnings.warn(f"left out: {failure}", PluginWarning, stacklevel=2)
    for mw, plugin, dist, version in provided:
        if mw.name in pm.blocked_middleware:
            continue
        if mw.name in found:
            other = found[mw.name]
            raise PluginError(
                f"middleware {mw.name!r} is provided by two plugins: "
                f"{other.plugin} (distribution {other.distribution}) and "
                f"{plugin} (distribution {dist})"
            )
        slot = SLOT.get(mw.name)
        if slot is None and mw.name in listed:
            slot = SLOT[AGENT_SLOT]
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
            f"plugin (available to agents: {', '.join(available) or 'none'}){failed_plugins(pm)}"
        )
    stack = [p for p in placements if p.slot is not None]
    taken = {p.name for p in stack}
    extra: list[Placement] = []
    for mw in objects:
        if mw.name in SLOT or mw.name in taken:
            raise ConfigError(
                f"{config.source}: middleware object {mw!r} is named {mw.name!r}, "
                "which is already a slot or a middleware of this stack; give it its own name"
            )
        taken.add(mw.name)
        extra.append(in_process(mw))
    agent_end = max(
        (i for i, p in enumerate(stack) if (p.slot or 0) <= SLOT[AGENT_SLOT]), default=-1
    )
    return [*stack[: agent_end + 1], *extra, *stack[agent_end + 1 :]]


def _check_listed(config: StackConfig) -> None:
    seen: set[str] = set()
    for name in config.agent_middleware:
        if name in SLOT:
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
    declared it), from every ``hango_options_schema`` implementation.

    A plugin whose hook raises (or returns no mapping) is recorded in ``plugins.failures``,
    not raised: only an agent with a table for one of its middlewares needs it."""
    out: dict[str, tuple[Mapping[str, Any], str]] = {}
    for impl in plugins.hook.hango_options_schema.get_hookimpls():
        dist, _ = plugins.distribution_of(impl.plugin_name)
        try:
            declared: dict[str, Any] = dict(cast(Mapping[str, Any], impl.function() or {}))
        except Exception as exc:
            plugins.fail(
                impl.plugin_name, f"hango_options_schema raised {type(exc).__name__}: {exc}"
            )
            continue
        for name, schema in declared.items():
            out[name] = (schema, f"plugin {impl.plugin_name} (distribution {dist})")
    return out


def check_options(
    options: Mapping[str, Any],
    plugins: PluginManager,
    *,
    source: str = "agent",
    schemas: Mapping[str, tuple[Mapping[str, Any], str]] | None = None,
) -> None:
    """Validate the agent's ``[options.<name>]`` tables against each plugin's JSON Schema
    (draft 2020-12, the library agent files use). ``schemas`` is ``option_schemas(plugins)``
    when the caller already has it (a planner reads it once per plugin manager).

    Raises ``ConfigError`` naming ``source``, the table and the field: a table for a middleware
    that declares no options (or that no installed plugin provides), or a value the schema
    refuses; ``PluginError`` naming the plugin when its schema is not valid JSON Schema.
    """
    if not options:
        return
    if schemas is None:
        schemas = option_schemas(plugins)
    for name, table in options.items():
        if name not in schemas:
            known = ", ".join(sorted(schemas)) or "none"
            raise ConfigError(
                f"{source}: [options.{name}]: no installed middleware named {name!r} takes "
                f"options (middlewares with options: {known}){failed_plugins(plugins)}"
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
