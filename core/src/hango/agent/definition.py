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
    middleware = ["audit_log"]          # the agent's own middlewares (slot ``agent``), in order
    tool_choice = "auto"                # optional: "auto", "any", "none" or {name = "tool"}
    parallel_tool_calls = false         # optional: at most one tool call per turn
    server_tools = [                    # optional: Anthropic tool definitions, sent as written
        {type = "web_search_20250305", name = "web_search", max_uses = 3},
    ]
    max_tool_concurrency = 8            # tool calls of one response running at once
    sequential_tools = ["deploy"]       # tools that run alone, a barrier within their batch
    tool_timeout = 300                  # seconds a tool call may take (default 300)
    tool_timeouts = { deploy = 1800 }   # per tool, above a tool's own ``timeout``
    output_strategy = "tool"            # optional: "native", "tool" or "prompted" (default:
                                        # native where the model has it, else the tool)
    output_retries = 2                  # invalid outputs the model may correct

    [output_schema]                     # optional: the run returns a JSON object of this schema
    type = "object"
    properties = { city = { type = "string" } }
    required = ["city"]

    [options.repeat_call]               # one table per middleware: its settings, validated by
    threshold = 4                       # the schema its plugin declares

In Python an agent may hold objects instead of names: a ``Model`` as ``model``, ``Tool`` objects or
plain typed functions in ``tools``, middleware objects in ``middleware``, and an ``output_type``
(a pydantic model, dataclass or attrs class) instead of an ``output_schema``: its schema is what
is stored, so the agent stays portable; only this process gets the typed value back. An agent
holding any other object runs and resumes in the process that holds the objects; it cannot be
queued for a worker elsewhere (``portable`` is False).
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import jsonschema
from attrs import field, frozen

from hango.agent.output import OUTPUT_STRATEGIES, OutputSchemaError, check_schema
from hango.agent.output import schema_of as _schema_of
from hango.config import ConfigError
from hango.provider.messages import OutputStrategy, TextBlock, ToolChoice
from hango.provider.model import Model
from hango.provider.select import model_from_spec
from hango.tool.base import DEFAULT_TOOL_TIMEOUT, Tool
from hango.tool.function import tool as as_tool
from hango.tool.registry import ToolRegistry

#: Prefix of what ``to_json`` stores in place of a Python object (``in-process:ScriptedModel``):
#: no module can be named so, and only the process holding the object can run the agent.
IN_PROCESS_PREFIX = "in-process:"


class AgentFileError(ConfigError):
    """An agent file is unreadable or invalid; the message names the file and the field."""


_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_SECONDS = {"type": "number", "exclusiveMinimum": 0}

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
        "middleware": {**_STRINGS, "uniqueItems": True},
        # Each table is validated against its plugin's schema when the stack is built.
        "options": {"type": "object", "additionalProperties": {"type": "object"}},
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
        # A JSON Schema itself: checked as one (and as an object's) by ``_check_output``.
        "output_schema": {"type": ["object", "null"]},
        "output_strategy": {"anyOf": [{"enum": list(OUTPUT_STRATEGIES)}, {"type": "null"}]},
        "output_retries": {"type": "integer", "minimum": 0},
        "max_tool_concurrency": {"type": "integer", "minimum": 1},
        "sequential_tools": {**_STRINGS, "uniqueItems": True},
        "tool_timeout": _SECONDS,
        "tool_timeouts": {"type": "object", "additionalProperties": _SECONDS},
    },
    "required": ["name", "model"],
    "additionalProperties": False,
}
_VALIDATOR = jsonschema.Draft202012Validator(AGENT_SCHEMA)


def _tools(items: Sequence[str | Tool | Callable[..., Any]]) -> tuple[str | Tool, ...]:
    # A plain function becomes a tool, as if decorated with @hango.tool.
    return tuple(
        item if isinstance(item, str | Tool) or not callable(item) else as_tool(item)
        for item in items
    )


def _describe(obj: object) -> str:
    """``in-process:`` and the object's name: a tool's, a middleware's, or a model's class."""
    if isinstance(obj, Tool):
        label = obj.spec.name
    elif isinstance(obj, Model):
        label = type(obj).__name__
    else:
        label = str(getattr(obj, "name", type(obj).__name__))
    return IN_PROCESS_PREFIX + label


def _optional_tuple(items: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if items is None else tuple(items)


def _tool_choice(value: str | Mapping[str, str] | ToolChoice | None) -> ToolChoice | None:
    # The agent file's form: "auto" | "any" | "none" | {name = "tool"}.
    if value is None or isinstance(value, ToolChoice):
        return value
    if isinstance(value, Mapping):
        return ToolChoice.tool(value["name"])
    return ToolChoice(value)  # type: ignore[arg-type]  # checked by AGENT_SCHEMA


@frozen
class AgentDefinition:
    """A validated agent. ``base_dir`` is the absolute folder relative paths resolve against.

    ``model`` is a model spec (``scripted:PATH``, ``anthropic:NAME``, ``openai:NAME``) or a
    ``Model`` object; ``tools`` holds ``module:attr`` references, ``Tool`` objects or typed
    functions; ``middleware`` holds plugin-provided middleware names or middleware objects, in
    chain order within the ``agent`` slot; ``options`` maps a middleware name to its settings.
    ``tool_timeout`` is how many seconds a tool call may take unless the tool declares its own
    ``timeout``; ``tool_timeouts`` (tool name -> seconds) overrides both for the tools it names.
    """

    name: str
    model: str | Model
    system: tuple[str, ...] = field(default=(), converter=tuple)
    tools: tuple[str | Tool, ...] = field(default=(), converter=_tools)
    tool_allowlist: tuple[str, ...] | None = field(default=None, converter=_optional_tuple)
    max_turns: int = 25
    max_tokens: int = 4096
    base_url: str | None = None
    base_dir: str = "."
    middleware: tuple[Any, ...] = field(default=(), converter=tuple)
    options: Mapping[str, Mapping[str, Any]] = field(factory=dict)
    tool_choice: ToolChoice | None = field(default=None, converter=_tool_choice)
    parallel_tool_calls: bool | None = None
    server_tools: tuple[Mapping[str, Any], ...] = field(default=(), converter=tuple)
    output_schema: Mapping[str, Any] | None = None
    output_type: type | None = field(default=None, eq=False)
    output_strategy: OutputStrategy | None = None
    output_retries: int = 2
    max_tool_concurrency: int = 8
    sequential_tools: tuple[str, ...] = field(default=(), converter=tuple)
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    tool_timeouts: Mapping[str, float] = field(factory=dict)
    #: Where the agent came from, for error messages (``agent file PATH``); not stored.
    source: str = field(default="", eq=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.output_schema is not None and self.output_type is not None:
            raise AgentFileError(
                f"agent {self.name!r}: give output_schema or output_type, not both"
            )
        schema = self.output_json_schema
        if schema is not None:
            try:
                check_schema(schema)
            except OutputSchemaError as exc:
                what = "output_type" if self.output_type is not None else "output_schema"
                raise AgentFileError(f"agent {self.name!r}: {what}: {exc}") from None

    @property
    def output_json_schema(self) -> dict[str, Any] | None:
        """The JSON Schema the run's output must validate against: ``output_schema``, or the
        schema of ``output_type``; None for an agent that answers in prose. Raises
        ``AgentFileError`` for an ``output_type`` pydantic cannot describe."""
        if self.output_type is not None:
            try:
                return _schema_of(self.output_type)
            except OutputSchemaError as exc:
                raise AgentFileError(f"agent {self.name!r}: output_type: {exc}") from None
        return None if self.output_schema is None else dict(self.output_schema)

    @property
    def label(self) -> str:
        """How errors name the agent: its file when it came from one, else its name."""
        return self.source or f"agent {self.name!r}"

    @property
    def middleware_names(self) -> tuple[str, ...]:
        """The plugin-provided middlewares the agent lists (its ``agent`` slot, by name)."""
        return tuple(
            m for m in self.middleware if isinstance(m, str) and not m.startswith(IN_PROCESS_PREFIX)
        )

    @property
    def middleware_objects(self) -> tuple[Any, ...]:
        """The middleware objects the agent holds (given in Python)."""
        return tuple(m for m in self.middleware if not isinstance(m, str))

    @property
    def portable(self) -> bool:
        """Whether another process can rebuild this agent from its JSON alone: it holds no
        Python objects (and was not stored from an agent that did)."""
        return not self.in_process_parts()

    def in_process_parts(self) -> list[str]:
        """Descriptions of the parts only this process holds, e.g. ``["model ScriptedModel"]``."""
        parts: list[str] = []
        for kind, values in (
            ("model", (self.model,)),
            ("tool", self.tools),
            ("middleware", self.middleware),
        ):
            for v in values:
                if not isinstance(v, str):
                    parts.append(f"{kind} {_describe(v).removeprefix(IN_PROCESS_PREFIX)}")
                elif v.startswith(IN_PROCESS_PREFIX):
                    parts.append(f"{kind} {v.removeprefix(IN_PROCESS_PREFIX)}")
        return parts

    @property
    def model_spec(self) -> str:
        """The model as a spec string (``in-process:CLASS`` for a Model object)."""
        return self.model if isinstance(self.model, str) else _describe(self.model)

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
        agent = cls.from_json(doc, source=f"agent file {path}")
        return attrs.evolve(agent, source=f"agent file {path}")

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str = "agent") -> AgentDefinition:
        """Validate ``doc`` against ``AGENT_SCHEMA``; raises ``AgentFileError`` naming the field."""
        error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(doc))
        if error is not None:
            raise AgentFileError(f"{source}: {error.json_path}: {error.message}")
        try:
            return cls(**doc)
        except AgentFileError as exc:
            # The agent's own check names the field; the source names the file.
            _, _, detail = str(exc).partition(": ")
            raise AgentFileError(f"{source}: {detail}") from None

    def to_json(self) -> dict[str, Any]:
        """The JSON document stored with runs; a Python object is stored as its description
        (``in-process:NAME``), so the document says what only this process can rebuild."""
        return {
            "name": self.name,
            "model": self.model_spec,
            "system": list(self.system),
            "tools": [t if isinstance(t, str) else _describe(t) for t in self.tools],
            "tool_allowlist": None if self.tool_allowlist is None else list(self.tool_allowlist),
            "max_turns": self.max_turns,
            "max_tokens": self.max_tokens,
            "base_url": self.base_url,
            "base_dir": self.base_dir,
            "middleware": [m if isinstance(m, str) else _describe(m) for m in self.middleware],
            "options": {k: dict(v) for k, v in self.options.items()},
            "tool_choice": _tool_choice_json(self.tool_choice),
            "parallel_tool_calls": self.parallel_tool_calls,
            "server_tools": [dict(e) for e in self.server_tools],
            # An output_type is stored as its schema: a worker validates the same output.
            "output_schema": self.output_json_schema,
            "output_strategy": self.output_strategy,
            "output_retries": self.output_retries,
            "max_tool_concurrency": self.max_tool_concurrency,
            "sequential_tools": list(self.sequential_tools),
            "tool_timeout": self.tool_timeout,
            "tool_timeouts": dict(self.tool_timeouts),
        }

    @property
    def system_blocks(self) -> tuple[TextBlock, ...]:
        return tuple(TextBlock(text) for text in self.system)

    def build_model(
        self,
        spec: str | None = None,
        base_url: str | None = None,
        *,
        settings: Mapping[str, str] | None = None,
    ) -> Model:
        """The agent's model, or the one named by ``spec`` (``--model``) instead; a provider
        reads its ``HANGO_*`` settings from ``settings`` (default: the environment).

        Raises ``ModelSpecError`` for a bad spec, ``AgentFileError`` for a Model object that
        another process stored (``in-process:``)."""
        if spec is None and not isinstance(self.model, str):
            return self.model
        chosen = spec or self.model_spec
        if chosen.startswith(IN_PROCESS_PREFIX):
            raise AgentFileError(
                f"agent {self.name!r}: its model was a Python object ({chosen}); only the "
                "process that holds it can run this agent (or choose a model spec)"
            )
        return model_from_spec(
            chosen,
            base_dir=Path(self.base_dir),
            base_url=base_url or self.base_url,
            settings=settings,
        )

    def load_tools(self) -> ToolRegistry:
        """Import every ``module:attr`` in ``tools`` (an attr may be a Tool or a list of them);
        raises ``AgentFileError`` naming the entry that fails."""
        if self.base_dir not in sys.path:
            sys.path.insert(0, self.base_dir)
        registry = ToolRegistry()
        for i, ref in enumerate(self.tools):
            if not isinstance(ref, str):
                registry.add(ref)
                continue
            where = f"agent {self.name!r}: tools[{i}] = {ref!r}"
            if ref.startswith(IN_PROCESS_PREFIX):
                raise AgentFileError(
                    f"{where}: the tool was a Python object; only the process that holds it "
                    "can run this agent"
                )
            module_name, sep, attr = ref.partition(":")
            if not sep:
                raise AgentFileError(f"{where}: expected module:attr")
            try:
                module = importlib.import_module(module_name)
            except (Exception, SystemExit) as exc:
                # Any import-time failure of the user's module (SyntaxError, a raise at top
                # level) is that entry's fault: one line, no traceback.
                raise AgentFileError(
                    f"{where}: importing {module_name} failed: {type(exc).__name__}: {exc}"
                ) from None
            try:
                value = getattr(module, attr)
            except AttributeError as exc:
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


def _tool_choice_json(choice: ToolChoice | None) -> str | dict[str, str] | None:
    if choice is None or choice.name is None:
        return None if choice is None else choice.mode
    return {"name": choice.name}
