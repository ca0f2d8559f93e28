"""Engines: what executes a run's steps. hango's own queue (``hango worker``) is the built-in
engine, named ``hango``; a plugin adds others through the ``hango_engines`` hook (hango-temporal
adds ``temporal``). Core never imports an engine: it finds one by name here.

An engine is handed runs that are already recorded (``Harness.start(..., engine=NAME)``: the
stack, model and ``config["engine"]`` are saved exactly as for the own queue), so whatever
executes their steps rebuilds them the same way. What crosses into an engine is ids; the run's
history and state stay in hango's store. docs/explanation/engines.md says why there is one seam.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from attrs import frozen

from hango.agent.interrupts.records import Decision
from hango.config import ConfigError
from hango.plugins import PluginManager

if TYPE_CHECKING:
    from hango.run.runner import Harness

#: The built-in engine: hango's own queue, executed by ``hango worker``.
OWN_ENGINE = "hango"


class EngineError(Exception):
    """An engine could not do what was asked (its server is unreachable, no worker answered, a
    decision was refused there); the message names the engine, the server and what to do.
    Nothing was lost: the run is as it was saved last."""


@frozen
class Delivered:
    """What an engine reported after delivering decisions to a run it executes: the tool call
    ids whose decision was ``recorded``, those already recorded identically (``unchanged``),
    and the ids of pending actions still ``waiting`` for one."""

    recorded: tuple[str, ...]
    unchanged: tuple[str, ...]
    waiting: tuple[str, ...]


@runtime_checkable
class Engine(Protocol):
    """An engine that executes recorded runs step by step (through ``Harness.step``).

    ``name`` is what ``hango submit --engine NAME`` and ``runs show`` (JSON field ``engine``)
    call it. Every method raises ``EngineError`` (one line) when the engine cannot be reached.
    """

    name: str

    async def submit(self, harness: Harness, run_id: uuid.UUID) -> None:
        """Start executing the recorded run ``run_id`` (idempotent: submitting it twice starts
        it once)."""
        ...

    async def decide(
        self, harness: Harness, run_id: uuid.UUID, decisions: Mapping[str, Decision]
    ) -> Delivered:
        """Deliver a person's ``decisions`` (tool call id -> ``Decision``) to the suspended run,
        which goes on in the engine once none waits. Raises ``EngineError`` when they were not
        accepted (the message says why: a refused decision names the call)."""
        ...

    async def cancel(self, harness: Harness, run_id: uuid.UUID) -> None:
        """Cancel the run's execution; the run is saved ``cancelled``."""
        ...

    def describe(self, run_id: uuid.UUID) -> Mapping[str, Any]:
        """What identifies the run inside the engine (a Temporal workflow id), as JSON fields
        for ``runs show --json`` (under ``engine_run``)."""
        ...


def installed_engines(plugins: PluginManager) -> dict[str, Engine]:
    """The engines the installed plugins provide (``hango_engines``), by name. Raises
    ``ConfigError`` naming both distributions when two provide one name, or naming the
    plugin whose hook returned something that is not an ``Engine``."""
    found: dict[str, tuple[Engine, str]] = {}
    for impl in plugins.hook.hango_engines.get_hookimpls():
        dist = plugins.distribution_of(impl.plugin_name)[0]
        provided = cast(Sequence[Any], impl.function() or ())
        for engine in provided:
            if not isinstance(engine, Engine) or not isinstance(engine.name, str):
                raise ConfigError(
                    f"plugin {impl.plugin_name} ({dist}): hango_engines returned {engine!r}, "
                    "which is not an engine"
                )
            if engine.name == OWN_ENGINE or engine.name in found:
                other = "hango" if engine.name == OWN_ENGINE else found[engine.name][1]
                raise ConfigError(
                    f"engine {engine.name!r} is provided by both {other} and {dist}; uninstall one"
                )
            found[engine.name] = (engine, dist)
    return {name: engine for name, (engine, _) in found.items()}


def engine_named(name: str, plugins: PluginManager) -> Engine | None:
    """The engine called ``name`` (None for ``hango``, the own queue). Raises ``ConfigError``
    in one line for a name no installed plugin provides, listing the names there are."""
    if name == OWN_ENGINE:
        return None
    engines = installed_engines(plugins)
    if name not in engines:
        known = ", ".join([OWN_ENGINE, *sorted(engines)])
        hint = " (install hango-temporal)" if name == "temporal" else ""
        raise ConfigError(f"unknown engine {name!r} (--engine): installed: {known}{hint}")
    return engines[name]


def engine_of(config: Mapping[str, Any]) -> str:
    """The engine a run was recorded for (its ``config["engine"]``; ``hango`` if none)."""
    name = config.get("engine")
    return name if isinstance(name, str) else OWN_ENGINE
