"""Agent files: a TOML description of an agent, validated field by field.

::

    name = "demo"
    model = "scripted:script.toml"      # or anthropic:NAME, openai:NAME
    base_url = "http://localhost:8000/v1"  # optional, for openai: models
    system = ["You are a careful assistant.", "Answer briefly."]   # text blocks (or one string)
    tools = ["demo_tools:list_files", "demo_tools:read_file"]      # module:attr, importable
                                                                   # from the agent file's folder
    tool_allowlist = ["list_files"]     # optional; absent = every tool
    max_turns = 12                      # model calls per run
    max_tokens = 4096                   # per model call
    tool_choice = "auto"                # optional: "auto", "any", "none" or {name = "tool"}
    parallel_tool_calls = false         # optional: at most one tool call per turn
    server_tools = [                    # optional: Anthropic tool definitions, sent as written
        {type = "web_search_20250305", name = "web_search", max_uses = 3},
    ]
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cattrs
import jsonschema
from attrs import frozen

from hango.config import ConfigError
from hango.provider.messages import TextBlock, ToolChoice
from hango.provider.model import Model
from hango.provider.select import model_from_spec
from hango.tool.base import Tool
from hango.tool.registry import ToolRegistry


class AgentFileError(ConfigError):
    """An agent file is unreadable or invalid; the message names the file and the field."""


_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}

#: The agent document, checked before it is structured: cattrs alone would turn ``5`` into
#: ``"5"`` or a string into a list of its letters, and the user must hear about it instead.
AGENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "model": {"type": "string", "minLength": 1},
        "system": _STRINGS,
        "tools": {"type": "array", "items": {"type": "string", "pattern": "^[^:]+:[^:]+$"}},
        # null: absent (what ``to_json`` stores for an agent without one); TOML has no null.
        "tool_allowlist": {"anyOf": [_STRINGS, {"type": "null"}]},
        "max_turns": {"type": "integer", "minimum": 1},
        "max_tokens": {"type": "integer", "minimum": 1},
        "base_url": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]},
        "base_dir": {"type": "string"},
        "tool_choice": {
            "anyOf": [
                {"enum": ["auto", "any", "none"]},
                {
                    "type": "object",
                    "properties": {"name": {"type": "string", "minLength": 1}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
                {"type": "null"},
            ]
        },
        "parallel_tool_calls": {"type": ["boolean", "null"]},
        # Passed through verbatim (see hango.provider.anthropic): only what every entry needs.
        "server_tools": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "type": {"type": "string", "minLength": 1},
                },
                "required": ["name"],
            },
        },
    },
    "required": ["name", "model"],
    "additionalProperties": False,
}
_VALIDATOR = jsonschema.Draft202012Validator(AGENT_SCHEMA)


@frozen
class AgentDefinition:
    """A validated agent. ``base_dir`` is the absolute folder relative paths resolve against."""

    name: str
    model: str
    system: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    tool_allowlist: tuple[str, ...] | None = None
    max_turns: int = 25
    max_tokens: int = 4096
    base_url: str | None = None
    base_dir: str = "."
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    server_tools: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_file(cls, path: str | Path) -> AgentDefinition:
        """Load and validate an agent file; raises ``AgentFileError``."""
        path = Path(path)
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise AgentFileError(f"agent file {path}: {exc}") from None
        if isinstance(doc.get("system"), str):
            doc["system"] = [doc["system"]]
        doc["base_dir"] = str(path.resolve().parent)
        return cls.from_json(doc, source=f"agent file {path}")

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str = "agent") -> AgentDefinition:
        """Validate ``doc`` against ``AGENT_SCHEMA``; raises ``AgentFileError`` naming the field."""
        error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(doc))
        if error is not None:
            raise AgentFileError(f"{source}: {error.json_path}: {error.message}")
        return _converter.structure(doc, cls)

    def to_json(self) -> dict[str, Any]:
        return _converter.unstructure(self)  # type: ignore[no-any-return]

    @property
    def system_blocks(self) -> tuple[TextBlock, ...]:
        return tuple(TextBlock(text) for text in self.system)

    def build_model(self, spec: str | None = None, base_url: str | None = None) -> Model:
        """The agent's model, or the one named by ``spec`` (``--model``) instead."""
        return model_from_spec(
            spec or self.model, base_dir=Path(self.base_dir), base_url=base_url or self.base_url
        )

    def load_tools(self) -> ToolRegistry:
        """Import every ``module:attr`` in ``tools`` (an attr may be a Tool or a list of them);
        raises ``AgentFileError`` naming the entry that fails."""
        if self.base_dir not in sys.path:
            sys.path.insert(0, self.base_dir)
        registry = ToolRegistry()
        for i, ref in enumerate(self.tools):
            where = f"agent {self.name!r}: tools[{i}] = {ref!r}"
            module_name, sep, attr = ref.partition(":")
            if not sep:
                raise AgentFileError(f"{where}: expected module:attr")
            try:
                value = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise AgentFileError(f"{where}: {exc}") from None
            items: Sequence[Any] = value if isinstance(value, list | tuple) else (value,)
            for item in items:
                if not isinstance(item, Tool):
                    raise AgentFileError(f"{where}: {item!r} is not a tool (use @hango.tool)")
                try:
                    registry.add(item)
                except ValueError as exc:
                    raise AgentFileError(f"{where}: {exc}") from None
        return registry


_converter = cattrs.Converter(forbid_extra_keys=True)
# tool_choice in the agent file's form: "auto" | "any" | "none" | {name = "tool"}.
_converter.register_structure_hook(
    ToolChoice,
    lambda v, _: ToolChoice.tool(v["name"]) if isinstance(v, dict) else ToolChoice(v),
)
_converter.register_unstructure_hook(
    ToolChoice, lambda c: {"name": c.name} if c.mode == "tool" else c.mode
)
