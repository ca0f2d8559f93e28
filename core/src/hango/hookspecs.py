"""The plugin contract: every hook hango calls, prefixed ``hango_``.

A feature plugin is a distribution that declares an entry point in the ``hango`` group::

    [project.entry-points.hango]
    todo = "hango_todo"

and implements hooks with ``hango.hookimpl``. Example plugin module::

    import hango

    class TodoMiddleware:
        name = "todo"
        ...

    @hango.hookimpl
    def hango_middleware(config: hango.StackConfig) -> TodoMiddleware:
        return TodoMiddleware()

Pluggy only DISCOVERS middleware: the order of the chain is ``hango.agent.stack.STACK_ORDER``,
never pluggy's call order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from hango.agent.middleware import Middleware
    from hango.agent.stack import StackConfig

PROJECT = "hango"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def hango_middleware(config: StackConfig) -> Middleware | Sequence[Middleware] | None:
    """Return the middleware(s) this plugin provides for one run's stack, or None for none.

    :param config: the run's ``StackConfig``: the agent's effective tool allowlist and the
        ``HANGO_*`` settings. A plugin reads its own settings from ``config.settings`` and
        raises ``hango.ConfigError`` naming the variable when one is invalid.

    Each returned middleware's ``name`` is its slot in ``STACK_ORDER``; a name outside it is not
    placed (``hango plugins`` lists it as unplaced). Two plugins returning the same name is an
    error naming both distributions. Called once per run when the stack is built.
    """
