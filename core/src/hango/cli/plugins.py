"""``hango plugins``: the installed middleware plugins and the slot each fills."""

from __future__ import annotations

import json
import sys

from rich.table import Table

from hango.agent.stack import STACK_ORDER
from hango.cli import (
    USER_ERRORS,
    console,
    err_console,
    json_option,
    main,
)
from hango.config import (
    StackConfig,
    hango_settings,
)
from hango.discovery import discover
from hango.plugins import make_plugin_manager

#: The slot column of a plugin that failed to load or whose hook raised (left out).
FAILED = "failed"


@main.command()
@json_option
def plugins(as_json: bool) -> None:
    """List installed middleware plugins and the slot each fills; a plugin that failed is
    listed as failed, with the reason."""
    pm = make_plugin_manager()
    try:
        placements = discover(StackConfig(settings=hango_settings()), pm)
    except USER_ERRORS as exc:
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    if as_json:
        rows = [
            {
                "name": p.name,
                "distribution": p.distribution,
                "version": p.version,
                "slot": _slot_label(p.slot),
                "capabilities": list(p.capabilities),
                "error": None,
            }
            for p in placements
        ]
        rows += [
            {
                "name": plugin,
                "distribution": pm.distribution_of(plugin)[0],
                "version": pm.distribution_of(plugin)[1],
                "slot": FAILED,
                "capabilities": [],
                "error": reason,
            }
            for plugin, reason in pm.failures.items()
        ]
        console.print_json(json.dumps(rows))
        return
    if not placements and not pm.failures:
        console.print(
            "No middleware plugins are installed: runs use the plain loop. Install some, e.g. "
            "`pip install hango-todo hango-repeat hango-allowlist hango-repair`.",
            markup=False,
        )
        return
    table = Table("slot", "name", "distribution", "version", "capabilities")
    for p in placements:
        table.add_row(
            _slot_label(p.slot), p.name, p.distribution, p.version, ", ".join(p.capabilities)
        )
    for plugin, reason in pm.failures.items():
        dist, version = pm.distribution_of(plugin)
        table.add_row(FAILED, plugin, dist, version, reason, style="red")
    console.print(table)


def _slot_label(slot: int | None) -> str:
    """A pinned slot by name; a middleware of a plugin's own name is for agents to list."""
    return STACK_ORDER[slot] if slot is not None else "available to agents"
