"""Selecting a provider by spec: keys from the vendors' environment variables, one clear line for
a missing key or a missing extra, and the retry policy's arithmetic."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from hango.config import ConfigError
from hango.provider import Model, ModelSpecError, model_from_spec
from hango.provider.anthropic import AnthropicModel
from hango.provider.openai import OpenAIChatModel
from hango.provider.retry import ProviderRetryPolicy, retry_after_seconds

ANTHROPIC_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_BASE_URL",
)


@pytest.fixture
def no_anthropic_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ANTHROPIC_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # and no profile on disk either


@pytest.fixture
def no_openai_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_anthropic_from_env(
    no_anthropic_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    model = model_from_spec("anthropic:claude-sonnet-4-5", base_url="http://localhost:9/")
    assert isinstance(model, AnthropicModel) and isinstance(model, Model)
    assert (model.name, model.provider_name) == ("claude-sonnet-4-5", "anthropic")
    assert str(model._client.base_url) == "http://localhost:9/"
    assert model._client.max_retries == 0  # ours are the only retries


def test_anthropic_without_a_key_says_what_to_set(no_anthropic_credentials: None) -> None:
    with pytest.raises(
        ModelSpecError, match=r"^anthropic:claude-x needs an API key: set ANTHROPIC_API_KEY$"
    ):
        model_from_spec("anthropic:claude-x")


def test_openai_from_env(no_openai_credentials: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = model_from_spec("openai:gpt-4o-mini")
    assert isinstance(model, OpenAIChatModel) and isinstance(model, Model)
    assert (model.name, model.provider_name) == ("gpt-4o-mini", "openai")
    assert model.max_tokens_field == "max_completion_tokens"
    assert model._client.max_retries == 0


def test_openai_compatible_server_needs_no_key(no_openai_credentials: None) -> None:
    model = model_from_spec("openai:qwen2.5", base_url="http://localhost:8000/v1")
    assert isinstance(model, OpenAIChatModel)
    assert str(model._client.base_url) == "http://localhost:8000/v1/"
    assert model.max_tokens_field == "max_tokens"


def test_openai_without_a_key_says_what_to_set(no_openai_credentials: None) -> None:
    with pytest.raises(ModelSpecError, match="openai:gpt-4o needs an API key: set OPENAI_API_KEY"):
        model_from_spec("openai:gpt-4o")


@pytest.mark.parametrize(
    ("spec", "sdk", "module", "extra"),
    [
        ("anthropic:claude-x", "anthropic", "hango.provider.anthropic", "hango[anthropic]"),
        ("openai:gpt-x", "openai", "hango.provider.openai", "hango[openai]"),
    ],
)
def test_a_missing_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, spec: str, sdk: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, sdk, None)  # makes ``import <sdk>`` fail as if not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ModelSpecError, match=re.escape(f"pip install '{extra}'")):
        model_from_spec(spec)


def test_retries_are_set_by_hango_model_retries(
    no_openai_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def retries() -> int:
        model = model_from_spec("openai:q", base_url="http://localhost:8000/v1")
        assert isinstance(model, OpenAIChatModel)
        return model.retry.max_retries

    assert retries() == 4
    monkeypatch.setenv("HANGO_MODEL_RETRIES", "0")
    assert retries() == 0
    monkeypatch.setenv("HANGO_MODEL_RETRIES", "many")
    with pytest.raises(ConfigError, match=r"^HANGO_MODEL_RETRIES must be an integer, got 'many'$"):
        retries()


def test_backoff_doubles_from_the_base_delay_up_to_the_cap() -> None:
    policy = ProviderRetryPolicy(max_retries=6, base_delay=0.5, max_delay=3.0)
    assert [policy.delay(n, None) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(1, 2.5) == 2.5  # the server's retry-after wins
    assert policy.delay(1, 90.0) == 3.0  # but never beyond the cap


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "250", "retry-after": "7"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({}, None),
    ],
)
def test_retry_after_header(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


def test_the_python_example_in_the_docs_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    docs = Path(__file__).parents[3] / "docs" / "how-to" / "use-a-model-provider.md"
    (example,) = re.findall(r"```python\n(.*?)```", docs.read_text(encoding="utf-8"), re.S)
    exec(compile(example, str(docs), "exec"), {})
