"""hango-fallback: when it switches models and when it never does, the per-call scope of a
switch, the options table, the plugin entry point, a kill and resume."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_fallback
from hango import (
    AgentDefinition,
    ConfigError,
    Harness,
    Message,
    ModelError,
    Request,
    RunStatus,
    ScriptedModel,
    TextDelta,
    ToolRegistry,
    telemetry,
)
from hango.agent.chain import Chain
from hango.agent.stack import STACK_ORDER
from hango.discovery import check_options
from hango.middleware import ModelRequest, StackConfig
from hango.plugins import make_plugin_manager
from hango.provider.events import StreamEvent
from hango.provider.model import accumulate
from hango.store.sqlite import SqliteRunStore
from hango.testing import Killed, ToolBox, assert_installed, kill_and_resume, new_state
from hango_fallback import MODELS_VARIABLE, ModelFallbackMiddleware, model_name

pytestmark = pytest.mark.anyio


class Flaky:
    """A named model that fails its calls listed in ``failures`` (call index -> error) and
    answers the others from ``turns`` (``ScriptedModel``'s rule: turn k for k assistant
    messages)."""

    def __init__(
        self,
        name: str,
        turns: Sequence[dict[str, Any]] = ({"text": "ok"},),
        failures: dict[int, BaseException] | None = None,
    ) -> None:
        self.name = name
        self.inner = ScriptedModel.from_turns(turns)
        self.failures = failures or {}
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        failure = self.failures.get(len(self.requests) - 1)
        if failure is not None:
            raise failure
        async for event in self.inner.stream(request):
            yield event


def overloaded() -> ModelError:
    return ModelError(
        "anthropic overloaded_error (HTTP 529): Overloaded", status=529, transient=True
    )


async def call_through(mw: ModelFallbackMiddleware, run_model: Any) -> str:
    """One model call through a chain of ``mw`` with the loop's base handler shape."""

    async def base(req: ModelRequest) -> Any:
        assert req.model is not None
        return await accumulate(req.model.stream(req.request))

    request = Request(model="run-model", messages=(Message.user("hi"),))
    response = await Chain.build([mw]).model_call(
        ModelRequest(request, new_state(), model=run_model), base
    )
    return response.message.text


# -- when it switches --------------------------------------------------------------------------


async def test_a_transient_failure_goes_to_the_next_model_with_an_event(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    run_model = Flaky("run-model", failures={0: overloaded()})
    backup = Flaky("backup", [{"text": "from the backup"}])
    mw = ModelFallbackMiddleware([("scripted:backup.toml", backup)])
    with recording_span():
        assert await call_through(mw, run_model) == "from the backup"
    assert len(run_model.requests) == len(backup.requests) == 1
    assert backup.requests[0] == run_model.requests[0]  # the same call, repeated
    (span,) = exporter.get_finished_spans()
    (event,) = span.events
    assert event.name == telemetry.RETRIED
    assert dict(event.attributes or {}) == {
        telemetry.MIDDLEWARE_NAME: "model_fallback",
        telemetry.REASON: "provider failed, next model",
        telemetry.REQUEST_MODEL: "backup",
        telemetry.PROVIDER_NAME: "hango.Flaky",
        "http.response.status_code": 529,
    }


async def test_models_are_tried_in_order_until_one_answers(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    connection = ModelError("openai: cannot connect", transient=True)
    first = Flaky("first", failures={0: connection})
    second = Flaky("second", [{"text": "second answers"}])
    mw = ModelFallbackMiddleware([("a:first", first), ("b:second", second)])
    with recording_span():
        assert await call_through(mw, Flaky("run", failures={0: overloaded()})) == (
            "second answers"
        )
    (span,) = exporter.get_finished_spans()
    named = [(e.attributes or {})[telemetry.REQUEST_MODEL] for e in span.events]
    assert named == ["first", "second"]
    # The connection failure had no HTTP status: the event carries none.
    assert "http.response.status_code" not in (span.events[1].attributes or {})


async def test_when_every_model_fails_the_error_names_each() -> None:
    mw = ModelFallbackMiddleware(
        [
            (
                "openai:gpt-4.1",
                Flaky("gpt-4.1", failures={0: ModelError("down", status=503, transient=True)}),
            )
        ]
    )
    with pytest.raises(ModelError) as caught:
        await call_through(mw, Flaky("claude", failures={0: overloaded()}))
    assert str(caught.value) == (
        "every model failed: claude: anthropic overloaded_error (HTTP 529): Overloaded; "
        "openai:gpt-4.1: down"
    )
    assert (caught.value.status, caught.value.transient) == (503, True)


# -- when it never switches ------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        ModelError("anthropic invalid_request_error (HTTP 400): messages: bad", status=400),
        ModelError("prompt is too long: 210000 tokens > 200000 maximum", status=400),
        ModelError("the connection broke mid-answer", transient=False),
        ModelError("script exhausted after 1 turns"),
    ],
    ids=["bad-request", "context-overflow", "broken-after-content", "not-a-provider-error"],
)
async def test_a_failure_that_is_not_transient_is_raised_as_it_is(error: ModelError) -> None:
    backup = Flaky("backup")
    mw = ModelFallbackMiddleware([("scripted:backup", backup)])
    with pytest.raises(ModelError) as caught:
        await call_through(mw, Flaky("run", failures={0: error}))
    assert caught.value is error
    assert backup.requests == []


async def test_a_fallback_models_rejection_ends_the_call() -> None:
    rejected = ModelError("openai (HTTP 400): unsupported parameter", status=400)
    second = Flaky("second")
    mw = ModelFallbackMiddleware(
        [("a:first", Flaky("first", failures={0: rejected})), ("b:second", second)]
    )
    with pytest.raises(ModelError) as caught:
        await call_through(mw, Flaky("run", failures={0: overloaded()}))
    assert caught.value is rejected
    assert second.requests == []


class Paused(BaseException):
    """Stands for a pause: like hango's interrupt, not an ``Exception``."""


async def test_a_pause_passes_through_and_switches_nothing() -> None:
    backup = Flaky("backup")
    mw = ModelFallbackMiddleware([("scripted:backup", backup)])
    with pytest.raises(Paused):
        await call_through(mw, Flaky("run", failures={0: Paused()}))
    assert backup.requests == []


class Hanging:
    name = "hanging"

    def __init__(self) -> None:
        self.started = anyio.Event()

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.started.set()
        await anyio.sleep_forever()
        yield  # pragma: no cover - an async generator that never yields


async def test_a_cancelled_call_is_not_repeated_elsewhere() -> None:
    backup = Flaky("backup")
    mw = ModelFallbackMiddleware([("scripted:backup", backup)])
    hanging = Hanging()
    async with anyio.create_task_group() as tg:
        tg.start_soon(call_through, mw, hanging)
        await hanging.started.wait()
        tg.cancel_scope.cancel()
    assert backup.requests == []


async def test_without_models_it_passes_the_failure_through() -> None:
    error = overloaded()
    with pytest.raises(ModelError) as caught:
        await call_through(ModelFallbackMiddleware(), Flaky("run", failures={0: error}))
    assert caught.value is error


# -- the plugin and its options --------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    placed = assert_installed(
        "fallback", "hango-fallback", hango_fallback, middleware="model_fallback"
    )
    assert placed.slot == STACK_ORDER.index("model_fallback") < STACK_ORDER.index("prompt_cache")
    assert placed.capabilities == ("model_wrapper",)
    assert isinstance(placed.middleware, ModelFallbackMiddleware)
    assert placed.middleware.models == ()  # nothing configured: a pass-through


def write_script(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(f'[[turns]]\ntext = "{text}"\n', encoding="utf-8")


def test_models_are_built_once_from_the_table_relative_to_the_agent_folder(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "backup.toml", "hi")
    config = StackConfig(
        middleware_options={"model_fallback": {"models": ["scripted:backup.toml"]}},
        base_dir=str(tmp_path),
    )
    mw = hango_fallback.hango_middleware(config=config)
    ((spec, model),) = mw.models
    assert spec == "scripted:backup.toml"
    # Read from the agent's folder, not the working directory.
    assert isinstance(model, ScriptedModel) and model.turns[0].text == "hi"


def test_the_variable_is_the_default_and_the_table_wins(tmp_path: Path) -> None:
    for name in ("a.toml", "b.toml", "c.toml"):
        write_script(tmp_path, name, name)
    settings = {MODELS_VARIABLE: f"scripted:{tmp_path / 'a.toml'}, scripted:{tmp_path / 'b.toml'}"}
    from_env = hango_fallback.hango_middleware(config=StackConfig(settings=settings))
    assert [spec for spec, _ in from_env.models] == [
        f"scripted:{tmp_path / 'a.toml'}",
        f"scripted:{tmp_path / 'b.toml'}",
    ]
    table = {"model_fallback": {"models": [f"scripted:{tmp_path / 'c.toml'}"]}}
    config = StackConfig(settings=settings, middleware_options=table)
    assert [spec for spec, _ in hango_fallback.hango_middleware(config=config).models] == [
        f"scripted:{tmp_path / 'c.toml'}"
    ]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"models": "openai:gpt-4.1"},
            r"\[options.model_fallback\].models: 'openai:gpt-4.1' is not of type 'array'",
        ),
        ({"models": []}, r"\[options.model_fallback\].models: \[\] should be non-empty"),
        (
            {"models": ["openai:a", "gpt-4.1"]},
            r"\[options.model_fallback\].models\[1\]: 'gpt-4.1' does not match",
        ),
        (
            {"modls": ["openai:a"]},
            r"\[options.model_fallback\]: Additional properties are not allowed \('modls'",
        ),
    ],
)
def test_an_invalid_table_is_refused_naming_the_field(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_options({"model_fallback": table}, make_plugin_manager(env={}), source="agent 't'")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "scripted:missing.toml",
            r"agent 't': \[options.model_fallback\].models\[0\]: .*missing.toml: cannot read",
        ),
        (
            "nosuch:model",
            r"agent 't': \[options.model_fallback\].models\[0\]: unknown model provider 'nosuch'",
        ),
    ],
)
def test_a_model_that_cannot_be_built_fails_naming_the_entry(
    tmp_path: Path, spec: str, message: str
) -> None:
    config = StackConfig(
        middleware_options={"model_fallback": {"models": [spec]}},
        base_dir=str(tmp_path),
        source="agent 't'",
    )
    with pytest.raises(ConfigError, match=message):
        hango_fallback.hango_middleware(config=config)


def test_a_bad_default_names_the_variable() -> None:
    config = StackConfig(settings={MODELS_VARIABLE: "nosuch:model"})
    with pytest.raises(ConfigError, match=rf"^{MODELS_VARIABLE}\[0\]: unknown model provider"):
        hango_fallback.hango_middleware(config=config)


# -- through runs: the switch lasts one call, and a kill and resume keeps nothing of it ------


box = ToolBox()


@box.tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"{term}: found"


async def test_a_switch_lasts_one_call_and_survives_a_kill_and_resume(tmp_path: Path) -> None:
    box.kill("lookup")  # the first call ends the process's run, as a kill -9 would
    (tmp_path / "backup.toml").write_text(
        '[[turns]]\ntext = "The backup looks it up."\n'
        '[[turns.tool_calls]]\nname = "lookup"\ninput = { term = "vent" }\n',
        encoding="utf-8",
    )
    run_model = Flaky(
        "run-model",
        [{"text": "unused"}, {"text": "Found it."}],
        failures={0: overloaded()},
    )
    agent = AgentDefinition(
        name="t",
        model="scripted:inline",
        base_dir=str(tmp_path),
        options={"model_fallback": {"models": ["scripted:backup.toml"]}},
    )

    def harness(store: SqliteRunStore) -> Harness:
        # A new plugin manager each time: the resumed run gets a new middleware, as in a new
        # process.
        pm = make_plugin_manager(load_entrypoints=False)
        pm.register(hango_fallback, name="fallback")
        return Harness(
            store, model=run_model, plugins=pm, tools=ToolRegistry([lookup]), settings={}
        )

    events: list[Any] = []

    async def emit(event: Any) -> None:
        events.append(event)

    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        seen = await kill_and_resume(
            store, harness, agent, "look up vent", killed_by=Killed, emit=emit
        )
        killed, finished, record = seen.killed, seen.finished, seen.record
        messages = await store.load_messages(record.tenant_id, record.session_id)
    # The backup's deltas reached the caller before the kill.
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        "The backup looks it up."
    )

    assert killed.status is RunStatus.RUNNING  # the kill left the last checkpoint
    assert finished.status is RunStatus.COMPLETED
    # Call 1 failed on the run's model and went to the backup; call 2, after the resume, went
    # to the run's model again.
    assert [len(r.messages) for r in run_model.requests] == [1, 3]
    assert [m.text for m in messages if m.role == "assistant"] == [
        "The backup looks it up.",
        "Found it.",
    ]
    # Neither the saved state nor the run's record knows a switch happened.
    for document in (killed.state, record.state, record.config):
        assert "backup" not in json.dumps(document)
    assert "model_fallback" not in record.state["private"]


# -- the README's agent file -----------------------------------------------------------------


def test_the_readme_agent_file_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = Path(__file__).resolve().parents[3] / "README.md"
    blocks = re.findall(r"^```toml\n(.*?)^```", readme.read_text(encoding="utf-8"), re.S | re.M)
    (text,) = [b for b in blocks if "[options.model_fallback]" in b]
    (tmp_path / "reviewer.toml").write_text(text, encoding="utf-8")
    agent = AgentDefinition.from_file(tmp_path / "reviewer.toml")
    pm = make_plugin_manager(env={})
    check_options(agent.options, pm, source="README")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    config = StackConfig(middleware_options=agent.options, base_dir=agent.base_dir)
    ((spec, model),) = hango_fallback.hango_middleware(config=config).models
    assert (spec, model_name(model), telemetry.provider_name(model)) == (
        "openai:gpt-4.1",
        "gpt-4.1",
        "openai",
    )
