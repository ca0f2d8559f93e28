"""Model spec strings (``scripted:PATH``, ``anthropic:NAME``, ``openai:NAME``) to Models."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hango.config import hango_settings, int_setting
from hango.provider.errors import ModelSpecError
from hango.provider.model import Model

#: Further attempts after a transient provider failure, unless HANGO_MODEL_RETRIES says otherwise.
DEFAULT_RETRIES = 4


def model_from_spec(
    spec: str,
    *,
    base_dir: Path | None = None,
    base_url: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> Model:
    """Build the Model named by ``spec``.

    ``scripted:PATH`` is resolved against ``base_dir`` (the agent file's folder) when relative.
    ``base_url`` points an ``openai:`` model at any OpenAI-compatible server.
    ``HANGO_MODEL_RETRIES`` (default 4, 0 for none) of ``settings`` (default: the environment;
    a ``Harness`` passes its own) is how often a provider retries a transient failure.
    Raises ``ModelSpecError`` (and ``ScriptError`` for a malformed script, ``ConfigError`` for a
    bad ``HANGO_MODEL_RETRIES``).
    """
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ModelSpecError(
            f"model {spec!r} must look like scripted:PATH, anthropic:NAME or openai:NAME"
        )
    if kind == "scripted":
        from hango.provider.scripted import ScriptedModel

        path = Path(rest)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return ScriptedModel.from_file(path)
    if kind == "anthropic":
        from hango.provider.anthropic import AnthropicModel

        return AnthropicModel.from_env(rest, base_url=base_url, max_retries=_retries(settings))
    if kind == "openai":
        from hango.provider.openai import OpenAIChatModel

        return OpenAIChatModel.from_env(rest, base_url=base_url, max_retries=_retries(settings))
    raise ModelSpecError(
        f"unknown model provider {kind!r} in {spec!r} (scripted, anthropic, openai)"
    )


def _retries(settings: Mapping[str, str] | None) -> int:
    chosen = hango_settings() if settings is None else settings
    return int_setting(chosen, "HANGO_MODEL_RETRIES", DEFAULT_RETRIES, minimum=0)
