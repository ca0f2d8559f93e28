"""Which tool calls need a person's approval, and which decisions each allows.

The agent file's table::

    [options.human_in_the_loop]
    interrupt_on = { edit_file = ["approve", "edit", "reject"], deploy = true, read_file = false }
    when = { edit_file = "policies:touches_code" }   # optional: ask only when this returns True

``true`` allows every decision (approve, edit, reject, respond), a list allows those, ``false``
(or no entry) never asks. ``when`` names, per tool, a predicate on the call's arguments as
``module:function``, imported when it is first needed (from where the agent's tools import).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from attrs import frozen

from hango.middleware import DECISIONS, ConfigError, DecisionType

Predicate = Callable[[dict[str, Any]], bool]

#: JSON Schema of the ``[options.human_in_the_loop]`` table.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "interrupt_on": {
            "type": "object",
            "additionalProperties": {
                "anyOf": [
                    {"type": "boolean"},
                    {
                        "type": "array",
                        "items": {"enum": list(DECISIONS)},
                        "minItems": 1,
                        "uniqueItems": True,
                    },
                ]
            },
        },
        "when": {
            "type": "object",
            "additionalProperties": {
                "type": "string",
                "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
            },
        },
    },
    "additionalProperties": False,
}


@frozen
class ToolPolicy:
    """The approval policy of one tool: the ``decisions`` a person may take, and ``when``, an
    optional predicate on the call's arguments (a function, or a ``module:function`` reference)
    saying whether this call needs approval (absent: every call does)."""

    decisions: tuple[DecisionType, ...] = DECISIONS
    when: Predicate | str | None = None


def policies(
    interrupt_on: Mapping[str, bool | Sequence[str] | ToolPolicy],
    when: Mapping[str, Predicate | str] | None = None,
    *,
    source: str = "human_in_the_loop",
) -> dict[str, ToolPolicy]:
    """Tool name -> ``ToolPolicy`` for every gated tool. Raises ``ConfigError`` naming
    ``source`` and the tool for an unknown decision, an empty list, or a ``when`` entry for a
    tool that is not gated."""
    out: dict[str, ToolPolicy] = {}
    for tool, setting in interrupt_on.items():
        if isinstance(setting, ToolPolicy):
            out[tool] = setting
        elif setting is True:
            out[tool] = ToolPolicy()
        elif setting is False:
            continue
        else:
            chosen = tuple(setting)
            unknown = [d for d in chosen if d not in DECISIONS]
            if not chosen or unknown:
                raise ConfigError(
                    f"{source}: interrupt_on.{tool}: decisions must be a non-empty list of "
                    f"{', '.join(DECISIONS)} (got {list(chosen)})"
                )
            out[tool] = ToolPolicy(chosen)  # type: ignore[arg-type]  # checked above
    for tool, predicate in (when or {}).items():
        if tool not in out:
            raise ConfigError(
                f"{source}: when.{tool}: tool {tool!r} is not gated by interrupt_on, so a "
                "predicate for it would never be asked"
            )
        out[tool] = ToolPolicy(out[tool].decisions, predicate)
    return out


def load_predicate(ref: str, *, source: str) -> Predicate:
    """Import ``module:function``; raises ``ConfigError`` naming ``source`` if it fails."""
    module_name, _, attr = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit) as exc:
        raise ConfigError(f"{source} = {ref!r}: {type(exc).__name__}: {exc}") from None
    if not callable(found):
        raise ConfigError(f"{source} = {ref!r} is not a function")
    predicate: Predicate = found
    return predicate
