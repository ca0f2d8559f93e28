"""The plugin manager: discovers feature plugins through the ``hango`` entry-point group."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping

import pluggy

from hango import hookspecs
from hango.config import hango_settings

ENTRY_POINT_GROUP = "hango"
DISABLE_VARIABLE = "HANGO_DISABLE_PLUGINS"


class PluginError(Exception):
    """A plugin failed to load or two plugins conflict; the message names them."""


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus, per registered plugin name, the distribution it came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.distributions: dict[str, tuple[str, str]] = {}
        self.entry_points: dict[str, str] = {}

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
    ``HANGO_DISABLE_PLUGINS`` (comma-separated entry-point names), load the ``hango`` entry
    points, check that every hook implementation matches a spec.

    Raises ``PluginError`` naming the entry point and distribution of a plugin that fails to
    import or implements an unknown hook.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    blocked = hango_settings(env).get(DISABLE_VARIABLE, "")
    for name in (n.strip() for n in blocked.split(",")):
        if name:
            pm.set_blocked(name)
    if load_entrypoints:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
                continue
            dist = ep.dist.name if ep.dist else "<unknown>"
            version = ep.dist.version if ep.dist else ""
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as exc:
                raise PluginError(
                    f"plugin {ep.name!r} ({ep.value}) from distribution {dist} failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            pm.distributions[ep.name] = (dist, version)
            pm.entry_points[ep.name] = f"entry point {ep.name} = {ep.value}"
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {exc.plugin!r} is invalid: {exc}") from exc
    return pm
