"""When and how often a tool call is retried: the ``[options.tool_retry]`` table, its JSON
Schema and its ``HANGO_TOOL_RETRY_*`` defaults, read into one ``RetryPolicy``."""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from attrs import frozen

from hango.middleware import ConfigError, duration_setting, int_setting

#: Transient failures, retried when ``retry_on`` is not set.
DEFAULT_RETRY_ON: Final = ("TimeoutError", "ConnectionError")

_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"

#: JSON Schema (draft 2020-12) of the agent file's ``[options.tool_retry]`` table.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "retry_on": {
            "type": "array",
            "items": {"type": "string", "pattern": _NAME},
            "minItems": 1,
            "uniqueItems": True,
        },
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
        "max_seconds": {"type": "number", "exclusiveMinimum": 0},
        "initial_delay": {"type": "number", "minimum": 0},
        "max_delay": {"type": "number", "minimum": 0},
        "backoff": {"type": "number", "minimum": 1},
        "jitter": {"type": "number", "minimum": 0},
        "tools": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
        },
        "retry_non_idempotent": {"type": "boolean"},
    },
    "additionalProperties": False,
}

RETRY_ON_VARIABLE: Final = "HANGO_TOOL_RETRY_ON"
MAX_ATTEMPTS_VARIABLE: Final = "HANGO_TOOL_RETRY_MAX_ATTEMPTS"
MAX_SECONDS_VARIABLE: Final = "HANGO_TOOL_RETRY_MAX_SECONDS"


@frozen
class RetryPolicy:
    """A tool call whose tool raised one of ``retry_on`` (or a subclass) is run again, at most
    ``max_attempts`` times in all, and never past ``max_seconds`` after its first attempt
    began: a retry whose wait would end later is not started.

    The wait before retry ``n`` (1, 2, ...) is ``min(initial_delay * backoff ** (n - 1),
    max_delay)`` seconds plus a random jitter of up to ``jitter`` seconds. ``tools`` limits
    retries to those tool names (None: every tool). A tool declaring ``idempotent = False``
    is retried only with ``retry_non_idempotent``.
    """

    retry_on: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError)
    max_attempts: int = 3
    max_seconds: float = 30.0
    initial_delay: float = 0.5
    max_delay: float = 10.0
    backoff: float = 2.0
    jitter: float = 0.5
    tools: frozenset[str] | None = None
    retry_non_idempotent: bool = False

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any],
        settings: Mapping[str, str] | None = None,
        *,
        source: str = "agent",
    ) -> RetryPolicy:
        """The policy of an ``[options.tool_retry]`` table (already validated against
        ``OPTIONS_SCHEMA``) over the ``HANGO_TOOL_RETRY_*`` defaults in ``settings``; a key the
        table sets wins over its variable.

        Raises ``ConfigError`` naming the field (with ``source``) or the variable when an
        exception name does not import as an exception class, or a variable is invalid.
        """
        settings = settings or {}
        defaults = cls()
        if "retry_on" in options:
            names: Sequence[str] = options["retry_on"]
            where = f"{source}: [options.tool_retry].retry_on"
        elif settings.get(RETRY_ON_VARIABLE):
            names = [n.strip() for n in settings[RETRY_ON_VARIABLE].split(",") if n.strip()]
            where = RETRY_ON_VARIABLE
        else:
            names, where = DEFAULT_RETRY_ON, "retry_on"
        retry_on = tuple(exception_class(name, f"{where}[{i}]") for i, name in enumerate(names))
        if "max_attempts" in options:
            max_attempts = int(options["max_attempts"])
        else:
            max_attempts = int_setting(settings, MAX_ATTEMPTS_VARIABLE, defaults.max_attempts)
        if "max_seconds" in options:
            max_seconds = float(options["max_seconds"])
        else:
            max_seconds = duration_setting(
                settings, MAX_SECONDS_VARIABLE, defaults.max_seconds, positive=True
            )
        tools = options.get("tools")
        return cls(
            retry_on,
            max_attempts,
            max_seconds,
            float(options.get("initial_delay", defaults.initial_delay)),
            float(options.get("max_delay", defaults.max_delay)),
            float(options.get("backoff", defaults.backoff)),
            float(options.get("jitter", defaults.jitter)),
            None if tools is None else frozenset(tools),
            bool(options.get("retry_non_idempotent", False)),
        )


def exception_class(name: str, where: str) -> type[BaseException]:
    """The exception class ``name`` names: a builtin by its bare name (``TimeoutError``),
    anything else as ``module.Class`` (``httpx.ConnectError``), imported here.

    Raises ``ConfigError`` starting with ``where`` when it does not import or is not an
    exception class.
    """
    module_name, _, attr = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name) if module_name else builtins, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: {name!r} does not import ({exc})") from None
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ConfigError(f"{where}: {name!r} is not an exception class")
    return found
