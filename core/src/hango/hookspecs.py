"""The plugin contract: every hook hango calls, prefixed ``hango_``.

A feature plugin is a distribution that declares an entry point in the ``hango`` group::

    [project.entry-points.hango]
    todo = "hango_todo"

and implements hooks with ``hango.middleware.hookimpl``. Example plugin module::

    from hango.middleware import StackConfig, hookimpl

    class TodoMiddleware:
        name = "todo"
        ...

    @hookimpl
    def hango_middleware(config: StackConfig) -> TodoMiddleware:
        return TodoMiddleware()

Pluggy only DISCOVERS middleware: the order of the chain is ``hango.agent.stack.STACK_ORDER``,
never pluggy's call order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from hango.config import StackConfig

if TYPE_CHECKING:
    import click

    from hango.agent.middleware import Middleware
    from hango.run.engine import Engine

PROJECT = "hango"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def hango_middleware(config: StackConfig) -> Middleware | Sequence[Middleware] | None:
    """Return the middleware(s) this plugin provides for one run's stack, or None for none.

    :param config: the run's ``StackConfig``: the agent's effective tool allowlist, the
        ``HANGO_*`` settings (deployment-wide defaults), the agent's ``middleware`` list and its
        ``[options.<name>]`` tables. A plugin reads its table with ``config.options(name)``
        (already validated against the schema from ``hango_options_schema``), falls back to
        ``config.settings``, and raises ``hango.middleware.ConfigError`` naming the variable
        when one is invalid.

    A returned middleware's ``name`` is either a pinned slot of ``STACK_ORDER``, which it fills
    whenever the plugin is installed, or a name of the plugin's own, which runs in the
    ``agent`` slot only for agents whose ``middleware`` list names it (``hango plugins`` lists
    it as "available to agents"). Two plugins returning the same name is an error naming both
    distributions; so is a hook that raises or returns something that is not a middleware.
    Called once per run when the stack is built.
    """


@hookspec
def hango_options_schema() -> Mapping[str, Mapping[str, Any]] | None:
    """Return the JSON Schemas (draft 2020-12) of the agent-file tables this plugin reads,
    keyed by middleware name, or None.

    An agent file's ``[options.<name>]`` table is validated against ``<name>``'s schema before
    a run is recorded; an error names the agent file, the table and the field. A table for a
    middleware that declares no schema is refused. Example::

        @hookimpl
        def hango_options_schema() -> dict[str, Any]:
            return {"audit_log": {
                "type": "object",
                "properties": {"path": {"type": "string", "minLength": 1}},
                "additionalProperties": False,
            }}
    """


@hookspec
def hango_cli_commands() -> Sequence[click.Command] | None:
    """Return the ``click`` commands (or groups) this plugin adds to the ``hango`` command,
    or None.

    Each becomes a subcommand under its own name (``hango mcp ...`` from hango-mcp). A name
    that hango's own commands or another plugin already use is refused with a warning naming
    the plugin, and the command stays out; a plugin whose hook raises is reported in one line
    and the rest of the CLI works. Example::

        @click.group("audit")
        def audit() -> None:
            '''Inspect the audit log.'''

        @hookimpl
        def hango_cli_commands() -> list[click.Command]:
            return [audit]
    """


@hookspec
def hango_engines() -> Sequence[Engine] | None:
    """Return the engines this plugin provides (``hango.Engine``: an object with a ``name`` and
    ``submit`` / ``decide`` / ``cancel`` / ``describe``), or None.

    ``hango submit --engine NAME`` hands a recorded run to the engine called ``NAME``;
    ``hango resume`` of such a run delivers its decisions through it. ``hango`` is the own
    queue's name and cannot be taken; two plugins providing one name is an error naming both
    distributions. Example::

        @hookimpl
        def hango_engines() -> list[Engine]:
            return [TemporalEngine()]
    """
