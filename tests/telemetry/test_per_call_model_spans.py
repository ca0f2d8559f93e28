"""The ``chat`` span of a call a wrapper sent to another model names that model and its
provider; the calls before and after name the run's model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from hango import ModelResponse, RunStatus, ScriptedModel, tool
from hango.middleware import ModelHandler, ModelRequest
from hango.testing import agent_harness

pytestmark = pytest.mark.anyio


class OtherProvider(ScriptedModel):
    provider_name = "other-provider"


@tool
def echo(text: str) -> str:
    """Return the text."""
    return text


class SwapSecondCall:
    name = "swap_second_call"

    def __init__(self, other: object) -> None:
        self.other = other

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        if len(req.request.messages) == 3:
            req = attrs.evolve(req, model=self.other)
        return await next(req)


async def test_the_chat_span_names_the_model_actually_called(tmp_path: Path, otel: Any) -> None:
    call = {"tool_calls": [{"name": "echo", "input": {"text": "hi"}}]}
    run_model = ScriptedModel.from_turns([call, {"text": "unused"}, {"text": "done"}], source="r")
    other = OtherProvider.from_turns([{"text": "unused"}, call], source="o")
    async with agent_harness(
        tmp_path, model=run_model, tools=[echo], stack=[SwapSecondCall(other)]
    ) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.COMPLETED
    chats = [s for s in otel.spans() if s.name.startswith("chat ")]
    assert [s.name for s in chats] == ["chat scripted:r", "chat scripted:o", "chat scripted:r"]
    assert [(s.attributes or {})["gen_ai.provider.name"] for s in chats] == [
        "hango.scripted",
        "other-provider",
        "hango.scripted",
    ]
    assert [(s.attributes or {})["gen_ai.request.model"] for s in chats][1] == "scripted:o"
