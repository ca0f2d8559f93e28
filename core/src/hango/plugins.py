"""The plugin manager: discovers feature plugins through the ``hango`` entry-point group."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping

import pluggy

from hango import hookspecs
from hango.config import HangoWarning, hango_settings

ENTRY_POINT_GROUP = "hango"
DISABLE_VARIABLE = "HANGO_DISABLE_PLUGINS"


class PluginError(Exception):
    """A plugin failed to load or two plugins conflict; the message names them."""


class PluginWarning(HangoWarning):
    """Plugin configuration that is probably a mistake, for example ``HANGO_DISABLE_PLUGINS``
    naming a plugin that is not installed (a typo disables nothing)."""


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus, per registered plugin name, the distribution it came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.distributions: dict[str, tuple[str, str]] = {}
        self.entry_points: dict[str, str] = {}
        #: Plugin name -> why it is left out (it failed to import, implements an unknown hook,
        #: or one of its hooks raised): one line naming the plugin, its distribution and how to
        #: disable it. A failed plugin blocks only the agents that need it.
        self.failures: dict[str, str] = {}
        #: Names in HANGO_DISABLE_PLUGINS that are no entry point's: middleware names, whose
        #: middlewares ``discover`` leaves out.
        self.blocked_middleware: frozenset[str] = frozenset()
        #: Every installed entry point's name (for the warning about a name to disable that
        #: matches nothing).
        self.installed: frozenset[str] = frozenset()

    def fail(self, plugin_name: str, reason: str) -> None:
        """Leave ``plugin_name`` out for ``reason`` (its hooks are no longer called)."""
        dist, _ = self.distribution_of(plugin_name)
        self.failures[plugin_name] = (
            f"plugin {plugin_name!r} ({self.entry_point_of(plugin_name)}) from {dist}: {reason} "
            f"(disable it with {DISABLE_VARIABLE}={plugin_name})"
        )
        plugin = self.get_plugin(plugin_name)
        if plugin is not None:
            self.unregister(plugin, name=plugin_name)

    def distribution_of(self, plugin_name: str) -> tuple[str, str]:
        """``(distribution, version)`` of a plugin; ``("<registered>", "")`` if not from one."""
        return self.distributions.get(plugin_name, ("<registered>", ""))

    def entry_point_of(self, plugin_name: str) -> str:
        """``name = value`` of a plugin's entry point; ``registered in Python`` if not from one."""
        return self.entry_points.get(plugin_name, "registered in Python")


def make_plugin_manager(
    *, env: Mapping[str, str] | None = None, load_entrypoints: bool = True
) -> PluginManager:
    """Build the plugin manager: add the hookspecs, block the names in
    ``HANGO_DISABLE_PLUGINS`` (comma-separated entry-point names or middleware names), load
    the ``hango`` entry points, check that every hook implementation matches a spec.

    A plugin that fails to import or implements an unknown hook is left out and recorded in
    ``failures`` (naming its entry point and distribution), so that it blocks only the agents
    that need it. Names in ``HANGO_DISABLE_PLUGINS`` that no entry point has are kept as
    middleware names (``blocked_middleware``); ``discover`` warns about those no plugin
    provides either.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    raw = hango_settings(env).get(DISABLE_VARIABLE, "")
    blocked = {name for name in (n.strip() for n in raw.split(",")) if name}
    for name in blocked:
        pm.set_blocked(name)
    if load_entrypoints:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        pm.blocked_middleware = frozenset(blocked - set(found.names))
        pm.installed = frozenset(found.names)
        for ep in found:
            if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
                continue
            dist = ep.dist.name if ep.dist else "<unknown>"
            version = ep.dist.version if ep.dist else ""
            pm.distributions[ep.name] = (dist, version)
            pm.entry_points[ep.name] = f"entry point {ep.name} = {ep.value}"
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as exc:
                pm.fail(ep.name, f"failed to load: {type(exc).__name__}: {exc}")
    while True:
        try:
            pm.check_pending()
            break
        except pluggy.PluginValidationError as exc:
            found_name = pm.get_name(exc.plugin)
            if found_name is None:
                raise PluginError(f"plugin {exc.plugin!r} is invalid: {exc}") from exc
            pm.fail(found_name, f"is invalid: {exc}")
    return pm
