"""The sub-agents an agent may delegate to: the ``[options.subagent]`` table.

::

    [options.subagent]
    general_purpose = true       # also offer "general-purpose": this agent's own file
    max_depth = 1                # delegation levels below this agent (1: children cannot delegate)
    max_report_chars = 20000     # characters of a child's report put in the task result

    [[options.subagent.agents]]
    name = "researcher"
    description = "Finds facts in the project's files and reports them with their sources."
    agent = "researcher.toml"    # relative to this agent file

Each named sub-agent is an agent file of its own (model, system, tools, middleware,
``[options.*]``): a child never inherits its parent's settings or thresholds. The
``general-purpose`` sub-agent is the parent's own agent with ``max_depth`` one lower, so at the
default depth its children have no ``task`` tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from attrs import frozen

from hango.middleware import ConfigError, StackConfig

#: The name of the sub-agent that is the parent's own agent.
GENERAL_PURPOSE: Final = "general-purpose"
DEFAULT_MAX_DEPTH: Final = 1
DEFAULT_MAX_REPORT_CHARS: Final = 20_000

OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "general_purpose": {"type": "boolean"},
        "max_depth": {"type": "integer", "minimum": 0, "maximum": 8},
        "max_report_chars": {"type": "integer", "minimum": 200},
        "agents": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"},
                    "description": {"type": "string", "minLength": 1, "maxLength": 2000},
                    "agent": {"type": "string", "minLength": 1},
                },
                "required": ["name", "description", "agent"],
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}

GENERAL_DESCRIPTION: Final = (
    "A general-purpose agent with your own instructions and tools, for a self-contained piece "
    "of work whose intermediate steps you do not need to see."
)


@frozen
class Subagent:
    """One sub-agent: its ``name`` (the ``subagent_type``), ``description`` (shown to the
    model) and ``agent_file`` (absolute path; None for ``general-purpose``)."""

    name: str
    description: str
    agent_file: Path | None


@frozen
class Catalog:
    """The sub-agents of one agent, in declaration order (``general-purpose`` last), and the
    limits of ``[options.subagent]``."""

    subagents: tuple[Subagent, ...]
    max_depth: int
    max_report_chars: int

    def get(self, name: str) -> Subagent | None:
        return next((s for s in self.subagents if s.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.subagents)


def catalog(config: StackConfig, options: Mapping[str, Any]) -> Catalog:
    """The catalog of ``options`` (``[options.subagent]``, already schema-checked).

    Raises ``ConfigError`` naming the agent and the entry for two sub-agents of one name, a
    name ``general-purpose`` given to a file, or an agent file that does not exist (paths
    resolve against ``config.base_dir``).
    """
    where = f"{config.source}: [options.subagent]"
    base = Path(config.base_dir or ".")
    found: list[Subagent] = []
    for i, entry in enumerate(options.get("agents", ())):
        name = entry["name"]
        if name == GENERAL_PURPOSE or any(s.name == name for s in found):
            raise ConfigError(
                f"{where} agents[{i}].name: {name!r} is taken; give each sub-agent its own name"
            )
        path = (base / entry["agent"]).resolve()
        if not path.is_file():
            raise ConfigError(f"{where} agents[{i}].agent: no agent file {path}")
        found.append(Subagent(name, entry["description"], path))
    if options.get("general_purpose", False):
        found.append(Subagent(GENERAL_PURPOSE, GENERAL_DESCRIPTION, None))
    return Catalog(
        tuple(found),
        options.get("max_depth", DEFAULT_MAX_DEPTH),
        options.get("max_report_chars", DEFAULT_MAX_REPORT_CHARS),
    )
