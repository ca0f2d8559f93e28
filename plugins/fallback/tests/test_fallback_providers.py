"""hango-fallback over the real provider clients (HTTP served by a mock transport): the switch
follows what the provider reports after its own retries."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest

from hango import Message, Model, ModelError, ModelResponse, Request, ScriptedModel
from hango.agent.chain import Chain
from hango.middleware import ModelRequest
from hango.provider.model import accumulate
from hango.testing import FakeServer, Served, anthropic_error, new_state
from hango_fallback import ModelFallbackMiddleware

pytestmark = pytest.mark.anyio

Handler = Callable[[httpx2.Request], httpx2.Response | Served]


@pytest.fixture
def anyio_backend() -> str:
    # The vendors' async SDK clients run on asyncio only.
    return "asyncio"


def on_anthropic(server: FakeServer) -> Model:
    return server.anthropic_model("claude-test", max_retries=1)


def on_openai(server: FakeServer) -> Model:
    return server.openai_model("gpt-4.1", max_retries=1)


def refuse(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


async def call(run_model: Model, backup: Model) -> ModelResponse:
    async def base(req: ModelRequest) -> ModelResponse:
        assert req.model is not None
        return await accumulate(req.model.stream(req.request))

    state = new_state()
    request = Request(model="claude-test", messages=(Message.user("hi"),))
    chain = Chain.build([ModelFallbackMiddleware([("scripted:backup", backup)])])
    return await chain.model_call(ModelRequest(request, state, model=run_model), base)


def spend_limit(_: httpx2.Request) -> httpx2.Response:
    error = {
        "type": "rate_limit_error",
        "message": "spend limit reached",
        "details": {"error_code": "enforced_spend_limit_reached"},
    }
    return httpx2.Response(429, json={"type": "error", "error": error})


@pytest.mark.parametrize(
    ("build", "answer", "attempts"),
    [
        (on_anthropic, lambda _: anthropic_error(529, "overloaded_error", "Overloaded"), 2),
        (on_anthropic, lambda _: anthropic_error(500, "api_error", "Internal server error"), 2),
        (on_anthropic, refuse, 2),
        # Not retried (waiting does not lift a spend limit), but another provider can serve.
        (on_anthropic, spend_limit, 1),
        (on_openai, lambda _: httpx2.Response(503, json={"error": {"message": "unavailable"}}), 2),
    ],
    ids=[
        "anthropic-overloaded",
        "anthropic-5xx",
        "anthropic-no-connection",
        "anthropic-spend-limit",
        "openai-5xx",
    ],
)
async def test_a_failure_the_provider_could_not_get_past_switches_models(
    build: Callable[[FakeServer], Model], answer: Handler, attempts: int
) -> None:
    server = FakeServer(answer)
    backup = ScriptedModel.from_turns([{"text": "from the backup"}])
    response = await call(build(server), backup)
    assert response.message.text == "from the backup"
    assert len(server.requests) == attempts  # the provider's own retries came first


@pytest.mark.parametrize(
    ("build", "answer"),
    [
        (
            on_anthropic,
            lambda _: anthropic_error(
                400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
            ),
        ),
        (
            on_anthropic,
            lambda _: anthropic_error(400, "invalid_request_error", "messages.0: bad role"),
        ),
        (
            on_openai,
            lambda _: httpx2.Response(
                400,
                json={
                    "error": {
                        "message": "This model's maximum context length is 128000 tokens.",
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                },
            ),
        ),
    ],
    ids=["anthropic-context-overflow", "anthropic-bad-request", "openai-context-overflow"],
)
async def test_a_rejected_request_never_switches_models(
    build: Callable[[FakeServer], Model], answer: Handler
) -> None:
    server = FakeServer(answer)
    backup = ScriptedModel.from_turns([{"text": "from the backup"}])
    with pytest.raises(ModelError, match="HTTP 400"):
        await call(build(server), backup)
    assert len(server.requests) == 1
