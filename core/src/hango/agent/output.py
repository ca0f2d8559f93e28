"""Structured output: what an agent returns when it declares ``output_schema`` / ``output_type``.

The output is a JSON object validated against the agent's schema (and, for an ``output_type``,
structured into that class, so its own validators run too). How the model is asked for it is
the request's ``OutputSpec.strategy`` (docs/explanation/structured-output.md says why there are
three): ``native`` reaches the provider as is; ``tool`` and ``prompted`` are lowered here into a
final-answer tool or a system block, in the loop's innermost model handler, so a model wrapper
sees (and may rewrite) the abstract spec and the provider only the concrete request.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs
import jsonschema
import pydantic

from hango.convert import CONVERTER
from hango.provider.messages import (
    JSON,
    OutputSpec,
    OutputStrategy,
    Request,
    TextBlock,
    ToolChoice,
    ToolSpec,
    ToolUseBlock,
)
from hango.provider.model import ModelResponse

#: The name of the final-answer tool of the ``tool`` strategy; no other tool may take it.
FINAL_ANSWER = "final_answer"

#: The strategies ``output_strategy`` accepts.
OUTPUT_STRATEGIES: tuple[OutputStrategy, ...] = ("native", "tool", "prompted")


class OutputSchemaError(ValueError):
    """An output schema (or type) that cannot be used; the message names the reason."""


def schema_of(output_type: type) -> dict[str, Any]:
    """The JSON Schema of ``output_type``: a pydantic model, a dataclass or an attrs class
    (a fresh copy; made once per type).

    Raises ``OutputSchemaError`` for any other type or one pydantic cannot describe.
    """
    return copy.deepcopy(_schema_of(output_type))


@functools.cache
def _schema_of(output_type: type) -> dict[str, Any]:
    # Generating a schema takes pydantic milliseconds; an agent's is asked for on every run.
    try:
        if isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel):
            return output_type.model_json_schema()
        if dataclasses.is_dataclass(output_type):
            return pydantic.TypeAdapter(output_type).json_schema()
        if attrs.has(output_type):
            # pydantic does not read attrs classes: the same fields as a pydantic model.
            fields: dict[str, Any] = {}
            for f in attrs.fields(output_type):
                default: Any = ... if f.default is attrs.NOTHING else f.default
                if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                    default = pydantic.Field(default_factory=default.factory)
                fields[f.alias or f.name] = (f.type if f.type is not None else Any, default)
            model = pydantic.create_model(output_type.__name__, **fields)
            schema: dict[str, Any] = model.model_json_schema()
            return schema
    except pydantic.PydanticUserError as exc:
        raise OutputSchemaError(f"{output_type.__name__}: {exc}") from None
    raise OutputSchemaError(
        f"{output_type!r} is not a pydantic model, a dataclass or an attrs class"
    )


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ``OutputSchemaError`` unless ``schema`` is a valid JSON Schema of an object: a
    final-answer tool's arguments and every provider's native output are objects."""
    if schema.get("type") != "object":
        raise OutputSchemaError('must describe an object (type = "object")')
    _check_document(json.dumps(schema, sort_keys=True, default=str))


@functools.lru_cache(maxsize=256)
def _check_document(document: str) -> None:
    # Checking against the metaschema costs milliseconds, and every run of the agent rebuilds
    # its definition from the stored JSON: once per distinct schema is enough.
    schema = json.loads(document)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise OutputSchemaError(f"not a valid JSON Schema: {exc.message}") from None


def strictable(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` meets the providers' strict rules: every object schema in it lists
    all its properties as required and closes itself (``additionalProperties: false``)."""

    def ok(node: Any) -> bool:
        if isinstance(node, Mapping):
            if node.get("type") == "object" or "properties" in node:
                props = node.get("properties", {})
                if node.get("additionalProperties") is not False:
                    return False
                if set(node.get("required", ())) != set(props):
                    return False
            return all(ok(v) for v in node.values())
        if isinstance(node, list):
            return all(ok(v) for v in node)
        return True

    return ok(schema)


def prefers_native(model: object) -> bool:
    """Whether ``model`` has native structured output: its ``native_output`` attribute
    (a bool, or a property deciding per model name); models without one get the tool."""
    return bool(getattr(model, "native_output", False))


def final_tool(spec: OutputSpec) -> ToolSpec:
    """The final-answer tool of the ``tool`` strategy: its arguments are the output."""
    return ToolSpec(
        FINAL_ANSWER,
        "Give your final answer: call this once, when you are done, with the answer as the "
        "arguments. The run ends with it.",
        spec.schema,
        strict=spec.strict,
    )


def _instruction(spec: OutputSpec) -> TextBlock:
    schema = json.dumps(spec.schema, ensure_ascii=False, sort_keys=True)
    return TextBlock(
        "When you give your final answer, reply with only a JSON object (no prose, no code "
        f"fence) that validates against this JSON Schema:\n{schema}"
    )


def lower(request: Request) -> Request:
    """``request`` as a provider gets it: a ``tool`` output becomes the final-answer tool (and
    a tool choice of ``any`` when the agent set none; a provider with thinking on never forces
    a choice), a ``prompted`` one a system block; ``native`` is left to the provider."""
    spec = request.output
    if spec is None or spec.strategy == "native":
        return request
    if spec.strategy == "tool":
        choice = request.tool_choice or ToolChoice("any")
        return attrs.evolve(
            request, tools=(*request.tools, final_tool(spec)), tool_choice=choice, output=None
        )
    return attrs.evolve(request, system=(*request.system, _instruction(spec)), output=None)


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


def parse_text(text: str) -> tuple[JSON, str | None]:
    """The JSON document in a model's text answer, or ``(None, reason)``; one code fence
    around it is tolerated (models add one even when told not to)."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    if not body.strip():
        return None, "the answer is empty; a JSON object was expected"
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, f"the answer is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"


class OutputCheck:
    """Validates candidate outputs against ``schema`` (compiled once) and, when given,
    structures them into ``output_type`` (whose own validators then run)."""

    def __init__(self, schema: Mapping[str, Any], output_type: type | None = None) -> None:
        self.schema = schema
        self.output_type = output_type
        self._validator = jsonschema.validators.validator_for(schema)(schema)

    def problem(self, value: JSON) -> str | None:
        """Why ``value`` is not a valid output (``$.field: reason``), or None."""
        best = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if best is not None:
            return f"{best.json_path}: {best.message}"
        if self.output_type is not None:
            try:
                self.typed(value)
            except Exception as exc:  # the type's own validators: any failure is the model's
                return f"$: {_type_error(exc)}"
        return None

    def typed(self, value: JSON) -> Any:
        """``value`` as an ``output_type`` instance (``value`` itself without one). Raises what
        the type's validation raises."""
        cls = self.output_type
        if cls is None:
            return value
        if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel):
            return cls.model_validate(value)
        if dataclasses.is_dataclass(cls):
            return pydantic.TypeAdapter(cls).validate_python(value)
        return CONVERTER.structure(value, cls)


def _type_error(exc: Exception) -> str:
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return f"{type(exc).__name__}: {exc}"


def reject_output(response: ModelResponse, reason: str) -> ModelResponse:
    """``response`` with its output rejected for ``reason`` (one line): what an output
    validator written as a model wrapper returns. The loop answers the model with the reason
    and lets it try again, as for a schema violation."""
    return attrs.evolve(response, output_error=reason)


def proposed_output(request: Request, response: ModelResponse) -> JSON:
    """The output ``response`` proposes for ``request``'s ``OutputSpec``, parsed but not
    validated: the first final-answer call's arguments (``tool``) or the text's JSON document
    (``native``, ``prompted``). None when it proposes none (a prose answer, other tool calls,
    text that is not JSON, or a request without an output)."""
    spec = request.output
    if spec is None:
        return None
    if spec.strategy == "tool":
        finals = [c for c in response.message.tool_uses if c.name == FINAL_ANSWER]
        return finals[0].input if finals and isinstance(finals[0].input, dict) else None
    if response.message.tool_uses:
        return None
    value, _ = parse_text(response.message.text)
    return value


def final_calls(calls: tuple[ToolUseBlock, ...]) -> tuple[ToolUseBlock, ...]:
    """The final-answer calls among ``calls``, in call order."""
    return tuple(c for c in calls if c.name == FINAL_ANSWER)
