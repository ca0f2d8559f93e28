"""The plugin manager: discovers feature plugins through the ``hango`` entry-point group."""

from __future__ import annotations

import importlib.metadata
import warnings
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
    import or implements an unknown hook. Warns (``PluginWarning``) about a name in
    ``HANGO_DISABLE_PLUGINS`` that no installed entry point has.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    raw = hango_settings(env).get(DISABLE_VARIABLE, "")
    blocked = {name for name in (n.strip() for n in raw.split(",")) if name}
    for name in blocked:
        pm.set_blocked(name)
    if load_entrypoints:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        unknown = sorted(blocked - set(found.names))
        if unknown:
            warnings.warn(
                f"{DISABLE_VARIABLE} names no installed plugin: {', '.join(unknown)} "
                f"(installed: {', '.join(sorted(found.names)) or 'none'})",
                PluginWarning,
                stacklevel=2,
            )
        for ep in found:
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
