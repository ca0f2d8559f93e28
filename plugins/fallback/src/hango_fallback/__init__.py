"""hango-fallback: model fallback (slot ``model_fallback`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``fallback``. The agent file's
``[options.model_fallback]`` table names the models to fall back on, in order::

    [options.model_fallback]
    models = ["anthropic:claude-haiku-4-5", "openai:gpt-4.1"]

``HANGO_MODEL_FALLBACK_MODELS`` (comma-separated specs) is the default for agents without the
table. With neither, the middleware passes every call through.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from hango import ModelSpecError, ScriptError, model_from_spec
from hango.middleware import ConfigError, StackConfig, hookimpl
from hango_fallback.middleware import ModelFallbackMiddleware, model_name

__all__ = [
    "MODELS_VARIABLE",
    "OPTIONS_SCHEMA",
    "ModelFallbackMiddleware",
    "hango_middleware",
    "hango_options_schema",
    "model_name",
]

#: The ``HANGO_*`` default of ``models``: model specs separated by commas.
MODELS_VARIABLE: Final = "HANGO_MODEL_FALLBACK_MODELS"

#: JSON Schema of ``[options.model_fallback]``.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "models": {
            "description": "model specs to try in order when the run's model cannot serve a call",
            "type": "array",
            "items": {"type": "string", "pattern": "^[a-z]+:.+$"},
            "minItems": 1,
            "uniqueItems": True,
        },
    },
    "additionalProperties": False,
}


@hookimpl
def hango_options_schema() -> dict[str, Any]:
    return {ModelFallbackMiddleware.name: OPTIONS_SCHEMA}


def _specs(config: StackConfig) -> tuple[Sequence[str], str]:
    """The specs and where they came from (the agent file wins over the variable)."""
    table = config.options(ModelFallbackMiddleware.name)
    if "models" in table:
        return table["models"], f"[options.{ModelFallbackMiddleware.name}].models"
    raw = config.settings.get(MODELS_VARIABLE, "")
    return [spec.strip() for spec in raw.split(",") if spec.strip()], MODELS_VARIABLE


@hookimpl
def hango_middleware(config: StackConfig) -> ModelFallbackMiddleware:
    """The fallback middleware with its models built once, here.

    Raises ``ConfigError`` naming the agent's field or the variable, and the entry, when
    a spec names no provider or its provider cannot be set up (a missing API key, a missing
    script), so the mistake shows before a run is recorded.
    """
    specs, where = _specs(config)
    # A table belongs to the agent, a variable to the deployment.
    if where != MODELS_VARIABLE:
        where = f"{config.source}: {where}"
    base_dir = None if config.base_dir is None else Path(config.base_dir)
    models = []
    for i, spec in enumerate(specs):
        try:
            models.append((spec, model_from_spec(spec, base_dir=base_dir)))
        except (ModelSpecError, ScriptError) as exc:
            raise ConfigError(f"{where}[{i}]: {exc}") from None
    return ModelFallbackMiddleware(models)
