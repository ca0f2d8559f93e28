"""The "installed through its entry point" check every plugin distribution's tests make."""

from __future__ import annotations

import importlib.metadata
from types import ModuleType

from hango.agent.stack import AGENT_SLOT, STACK_ORDER, Placement
from hango.config import StackConfig
from hango.discovery import discover
from hango.plugins import make_plugin_manager


def assert_installed(
    plugin: str,
    dist: str,
    module: ModuleType,
    *,
    middleware: str,
    config: StackConfig | None = None,
) -> Placement:
    """Check that distribution ``dist`` is installed and declares the ``hango`` entry point
    ``plugin = <module>``, that the plugin manager loads it from there (the module itself,
    with the distribution's name and version), and that the stack built for ``config``
    places the middleware named ``middleware`` in its ``STACK_ORDER`` slot (the ``agent`` slot
    for a name of the plugin's own, which ``config.agent_middleware`` must list). Returns that
    placement, for the test's own checks of its capabilities and options.

    Raises ``AssertionError`` naming what differs."""
    eps = [ep for ep in importlib.metadata.entry_points(group="hango") if ep.name == plugin]
    assert len(eps) == 1, f"entry points named {plugin!r} in group 'hango': {eps}"
    (ep,) = eps
    assert ep.value == module.__name__, f"{plugin} = {ep.value}, not {module.__name__}"
    assert ep.dist is not None and ep.dist.name == dist, f"{plugin} comes from {ep.dist}"
    pm = make_plugin_manager(env={})
    assert pm.get_plugin(plugin) is module
    version = importlib.metadata.version(dist)
    assert pm.distribution_of(plugin) == (dist, version)
    placed = [p for p in discover(config or StackConfig(), pm) if p.name == middleware]
    assert len(placed) == 1, f"the stack holds {len(placed)} middlewares named {middleware!r}"
    # A name of the plugin's own runs in the agent slot (when the agent lists it).
    slot = middleware if middleware in STACK_ORDER else AGENT_SLOT
    assert placed[0].slot is not None, (
        f"{middleware} is only available to agents: list it in config.agent_middleware"
    )
    assert placed[0].slot == STACK_ORDER.index(slot), (
        f"{middleware} is in slot {placed[0].slot}, not {STACK_ORDER.index(slot)} ({slot})"
    )
    return placed[0]
