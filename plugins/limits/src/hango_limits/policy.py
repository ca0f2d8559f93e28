"""What the limits are: the ``[options.limits]`` table, its JSON Schema and its ``HANGO_*``
defaults, read into one ``LimitPolicy``.

A limit caps one counter (model calls, tool calls, calls of one tool, input or output tokens)
in one scope (the run, or the whole session). What happens when a limit is reached is the
policy's ``on_limit`` (model-call and token limits) or ``on_tool_limit`` (tool-call limits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from attrs import frozen

from hango.middleware import ConfigError, int_setting

Scope = Literal["run", "session"]
#: ``continue``: the blocked tool call gets an error result the model reads, the run goes on.
#: ``end``: every call left in the batch gets an error result and the run ends, completed, with
#: a final assistant message saying which limit was reached. ``error``: the run fails, naming
#: the limit. ``suspend``: the run waits for a person to raise the limit (tool limits only: a run
#: pauses before a tool call, never before a model call).
OnLimit = Literal["continue", "end", "error", "suspend"]

SCOPES: Final[tuple[Scope, ...]] = ("run", "session")
#: The counters a limit can cap, besides ``per_tool``; model calls and tokens first.
MODEL_COUNTERS: Final = ("model_calls", "input_tokens", "output_tokens")
COUNTERS: Final = (*MODEL_COUNTERS, "tool_calls")
ON_LIMIT: Final[tuple[OnLimit, ...]] = ("end", "error")
ON_TOOL_LIMIT: Final[tuple[OnLimit, ...]] = ("continue", "end", "error", "suspend")
DEFAULT_ON_LIMIT: Final[OnLimit] = "end"
DEFAULT_ON_TOOL_LIMIT: Final[OnLimit] = "continue"

_NOUN: Final = {
    "model_calls": "model call",
    "tool_calls": "tool call",
    "input_tokens": "input token",
    "output_tokens": "output token",
}

_POSITIVE: Final = {"type": "integer", "minimum": 1}


_SCOPE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        **{counter: _POSITIVE for counter in COUNTERS},
        "per_tool": {
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": _POSITIVE,
        },
    },
    "additionalProperties": False,
}

#: JSON Schema (draft 2020-12) of the agent file's ``[options.limits]`` table.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "on_limit": {"enum": list(ON_LIMIT)},
        "on_tool_limit": {"enum": list(ON_TOOL_LIMIT)},
        "run": _SCOPE_SCHEMA,
        "session": _SCOPE_SCHEMA,
    },
    "additionalProperties": False,
}


def setting_name(scope: Scope, counter: str) -> str:
    """The ``HANGO_*`` default of one limit: ``HANGO_LIMITS_RUN_MODEL_CALLS``."""
    return f"HANGO_LIMITS_{scope.upper()}_{counter.upper()}"


ON_LIMIT_VARIABLE: Final = "HANGO_LIMITS_ON_LIMIT"
ON_TOOL_LIMIT_VARIABLE: Final = "HANGO_LIMITS_ON_TOOL_LIMIT"


@frozen
class Limit:
    """At most ``maximum`` of ``counter`` in ``scope``; ``tool`` names the one tool a
    ``per_tool`` limit counts (None for the other counters)."""

    scope: Scope
    counter: str
    maximum: int
    tool: str | None = None

    @property
    def key(self) -> str:
        """Where it is set in ``[options.limits]``: ``run.model_calls``,
        ``session.per_tool.search``."""
        if self.tool is not None:
            return f"{self.scope}.per_tool.{self.tool}"
        return f"{self.scope}.{self.counter}"

    def describe(self) -> str:
        """For people and models: ``20 tool calls per run``, ``3 calls of tool 'search' per
        session``."""
        plural = "" if self.maximum == 1 else "s"
        if self.tool is not None:
            return f"{self.maximum} call{plural} of tool {self.tool!r} per {self.scope}"
        return f"{self.maximum} {_NOUN[self.counter]}{plural} per {self.scope}"


@frozen
class LimitPolicy:
    """Every configured limit, in a fixed order (run before session, model calls, input
    tokens, output tokens, tool calls, then each tool by name), and what reaching one does."""

    limits: tuple[Limit, ...] = ()
    on_limit: OnLimit = DEFAULT_ON_LIMIT
    on_tool_limit: OnLimit = DEFAULT_ON_TOOL_LIMIT

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], settings: Mapping[str, str] | None = None
    ) -> LimitPolicy:
        """The policy of an ``[options.limits]`` table (already validated against
        ``OPTIONS_SCHEMA``) over the ``HANGO_LIMITS_*`` defaults in ``settings``: a key the
        table sets wins over its variable.

        Raises ``ConfigError`` naming the variable when a ``HANGO_LIMITS_*`` value is invalid.
        """
        settings = settings or {}
        limits: list[Limit] = []
        for scope in SCOPES:
            table: Mapping[str, Any] = options.get(scope, {})
            for counter in COUNTERS:
                if counter in table:
                    maximum = int(table[counter])
                else:
                    maximum = int_setting(settings, setting_name(scope, counter), 0, minimum=1)
                if maximum:
                    limits.append(Limit(scope, counter, maximum))
            for tool, maximum in sorted(table.get("per_tool", {}).items()):
                limits.append(Limit(scope, "per_tool", int(maximum), tool))
        return cls(
            tuple(limits),
            options.get("on_limit")
            or _behaviour(settings, ON_LIMIT_VARIABLE, ON_LIMIT, DEFAULT_ON_LIMIT),
            options.get("on_tool_limit")
            or _behaviour(settings, ON_TOOL_LIMIT_VARIABLE, ON_TOOL_LIMIT, DEFAULT_ON_TOOL_LIMIT),
        )

    def maximum(self, key: str) -> int:
        """The configured maximum of the limit set at ``key`` (``run.tool_calls``)."""
        return next(lim.maximum for lim in self.limits if lim.key == key)


def _behaviour(
    settings: Mapping[str, str], name: str, allowed: tuple[OnLimit, ...], default: OnLimit
) -> OnLimit:
    raw = settings.get(name)
    if not raw:
        return default
    if raw not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw
