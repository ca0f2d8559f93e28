"""The pinned stack: the one place the order of the middleware chain is decided.

Plugins only say WHICH middlewares exist (hook ``hango_middleware``); ``STACK_ORDER`` says where
each one sits. Installing or removing a plugin fills or empties a slot and never moves another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from hango.agent.middleware import Middleware, capabilities
from hango.plugins import PluginError, PluginManager, make_plugin_manager

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
    # never asks a human.
    "repeat_call",
    # Prompt cache before memory: memory's blocks land after the breakpoint, so memory edits
    # do not invalidate the cached prefix.
    "prompt_cache",
    "memory",
    # Approval wraps the actual execution, after every middleware that may short-circuit.
    "human_in_the_loop",
    # Allowlist last (innermost): nothing inside it can re-add a banned tool or call one.
    "tool_allowlist",
)


@frozen
class StackConfig:
    """What plugins build their middleware from: the agent's effective ``tool_allowlist``
    (None = every tool) and the ``HANGO_*`` settings (name -> raw string)."""

    tool_allowlist: frozenset[str] | None = None
    settings: Mapping[str, str] = field(factory=dict)


@frozen
class Placement:
    """One discovered middleware: where it came from and its slot (None = unplaced)."""

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


def discover(config: StackConfig, plugins: PluginManager | None = None) -> list[Placement]:
    """Every middleware the installed plugins provide for ``config``, sorted by slot, unplaced
    last (by name). Raises ``PluginError`` when two plugins provide the same name."""
    pm = plugins if plugins is not None else make_plugin_manager()
    found: dict[str, Placement] = {}
    for impl in pm.hook.hango_middleware.get_hookimpls():
        provided: Any = impl.function(config=config)
        if provided is None:
            continue
        items: list[Middleware] = (
            list(provided) if isinstance(provided, list | tuple) else [provided]
        )
        dist, version = pm.distribution_of(impl.plugin_name)
        for mw in items:
            if mw.name in found:
                other = found[mw.name]
                raise PluginError(
                    f"middleware {mw.name!r} is provided by two plugins: "
                    f"{other.plugin} (distribution {other.distribution}) and "
                    f"{impl.plugin_name} (distribution {dist})"
                )
            slot = STACK_ORDER.index(mw.name) if mw.name in STACK_ORDER else None
            found[mw.name] = Placement(mw, impl.plugin_name, dist, version, slot)
    return sorted(
        found.values(),
        key=lambda p: (p.slot is None, p.slot if p.slot is not None else 0, p.name),
    )


def default_stack(config: StackConfig, plugins: PluginManager | None = None) -> list[Middleware]:
    """The run's middlewares in ``STACK_ORDER``; empty slots are skipped, unplaced names dropped.

    The same config and the same installed plugins give the same chain whatever the order of
    registration or discovery. An empty list is the plain loop.
    """
    return [p.middleware for p in discover(config, plugins) if p.slot is not None]
