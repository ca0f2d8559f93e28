"""A model call whose server reported no usage (llama.cpp's OpenAI server) records no token
counts: zeros would read as a free call in every dashboard."""

from __future__ import annotations

from typing import Any

from hango import telemetry
from hango.agent import spans
from hango.provider import Message, ModelResponse, Request, StopReason, Usage


def test_unknown_usage_records_no_token_counts(otel: Any) -> None:
    with spans.chat_span(Request("smollm2", ()), {telemetry.PROVIDER_NAME: "openai"}) as chat:
        chat.finished(ModelResponse(Message("assistant", ()), StopReason.END_TURN, Usage.unknown()))
    (span,) = otel.named("chat smollm2")
    assert span.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert not [k for k in span.attributes if k.startswith("gen_ai.usage.")]
    assert otel.points("gen_ai.client.token.usage") == []

    with spans.chat_span(Request("smollm2", ()), {telemetry.PROVIDER_NAME: "openai"}) as chat:
        chat.finished(ModelResponse(Message("assistant", ()), StopReason.END_TURN, Usage(3, 2)))
    assert otel.named("chat smollm2")[1].attributes["gen_ai.usage.output_tokens"] == 2
