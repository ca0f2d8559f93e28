"""Structured output: an agent with ``output_schema`` / ``output_type`` ends its run with a
validated value, asked for natively, with the final-answer tool or in the prompt; invalid
output goes back to the model up to ``output_retries`` times; the final answer's sibling calls
are answered; middlewares see (and may rewrite or reject) the output."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import attrs
import pydantic
import pytest

from hango import (
    AgentDefinition,
    AgentFileError,
    ModelResponse,
    OutputSpec,
    RunStatus,
    tool,
)
from hango.middleware import (
    FINAL_ANSWER,
    ModelHandler,
    ModelRequest,
    proposed_output,
    reject_output,
)
from hango.testing import RecordingModel, agent_harness, assert_valid_history, saved_history

pytestmark = pytest.mark.anyio

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}


def text(value: Any) -> dict[str, Any]:
    return {"text": value if isinstance(value, str) else json.dumps(value)}


def final(value: Any, *others: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    uses = [{"name": n, "input": i} for n, i in others]
    return {"tool_calls": [*uses, {"name": FINAL_ANSWER, "input": value}]}


looked: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look up a city's weather."""
    looked.append(city)
    return f"{city}: 21 C"


def with_output(agent: AgentDefinition, **changes: Any) -> AgentDefinition:
    return attrs.evolve(agent, **{"output_schema": WEATHER, **changes})


async def test_native_output_on_the_scripted_model_is_validated_stored_and_returned(
    tmp_path: Path,
) -> None:
    model = RecordingModel([text({"city": "Paris", "temp": 21})])
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent), "weather in Paris?")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert finished.output == {"city": "Paris", "temp": 21}
    assert record.state["output"] == {"city": "Paris", "temp": 21}
    (request,) = model.requests
    assert request.output == OutputSpec(WEATHER, "native", strict=True)
    assert [t.name for t in request.tools] == []  # native: no final-answer tool


async def test_invalid_output_goes_back_to_the_model_until_it_is_valid(tmp_path: Path) -> None:
    turns = [text("It is warm in Paris."), text({"city": "Paris", "temp": "warm"})]
    turns.append(text("```json\n" + json.dumps({"city": "Paris", "temp": 21}) + "\n```"))
    model = RecordingModel(turns)
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent), "weather?")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
        history = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert finished.output == {"city": "Paris", "temp": 21}
    assert len(model.requests) == 3
    not_json = model.requests[1].messages[-1].text
    assert "not accepted: the answer is not JSON" in not_json
    wrong_type = model.requests[2].messages[-1].text
    assert "$.temp: 'warm' is not of type 'number'" in wrong_type
    assert record.state["output_failures"] == 2
    assert_valid_history(history)


async def test_output_still_invalid_after_the_retries_fails_the_run_in_one_line(
    tmp_path: Path,
) -> None:
    turns = [text({"city": "Paris"}), text({"city": "Paris", "temp": "x"})]
    async with agent_harness(tmp_path, turns=turns) as h:
        finished = await h.run(with_output(h.agent, output_retries=1), "weather?")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
    assert finished.status is RunStatus.FAILED
    assert finished.error == (
        "output invalid after 2 attempts: $.temp: 'x' is not of type 'number'"
    )
    assert record.error == finished.error and "\n" not in finished.error
    assert finished.output is None and "output" not in record.state


class Weather(pydantic.BaseModel):
    city: str
    temp: float

    @pydantic.field_validator("temp")
    @classmethod
    def plausible(cls, value: float) -> float:
        if value < -90:
            raise ValueError("colder than anywhere on Earth")
        return value


@dataclasses.dataclass
class WeatherDC:
    city: str
    temp: float


@attrs.frozen
class WeatherAttrs:
    city: str
    temp: float


@pytest.mark.parametrize("output_type", [Weather, WeatherDC, WeatherAttrs])
async def test_an_output_type_returns_an_instance_and_runs_its_validators(
    tmp_path: Path, output_type: type
) -> None:
    turns = [text({"city": "Oslo", "temp": -120}), text({"city": "Oslo", "temp": -3})]
    model = RecordingModel(turns)
    async with agent_harness(tmp_path, model=model) as h:
        agent = attrs.evolve(h.agent, output_type=output_type)
        finished = await h.run(agent, "weather?")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
        stored = AgentDefinition.from_json(
            (await h.store.get_agent(h.tenant_id, record.agent_id)).definition
        )
    assert finished.status is RunStatus.COMPLETED
    assert isinstance(finished.output, output_type)
    # Only the pydantic model has a validator of its own (refusing -120).
    temp = -3 if output_type is Weather else -120
    assert (finished.output.city, finished.output.temp) == ("Oslo", temp)
    assert record.state["output"] == {"city": "Oslo", "temp": temp}
    # The schema is what is stored: a worker validates the same output, returning JSON.
    assert stored.output_schema is not None and stored.output_type is None
    assert set(stored.output_schema["required"]) == {"city", "temp"}
    if output_type is Weather:
        assert len(model.requests) == 2
        assert "colder than anywhere on Earth" in model.requests[1].messages[-1].text
    else:
        assert len(model.requests) == 1  # no validator of their own: -120 is a float


async def test_the_tool_strategy_runs_the_final_answers_siblings_and_ends(tmp_path: Path) -> None:
    looked.clear()
    answer = final({"city": "Rome", "temp": 25}, ("lookup", {"city": "Rome"}))
    model = RecordingModel([answer])
    async with agent_harness(tmp_path, model=model, tools=[lookup]) as h:
        finished = await h.run(with_output(h.agent, output_strategy="tool"), "weather?")
        history = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert finished.output == {"city": "Rome", "temp": 25}
    assert looked == ["Rome"]  # the sibling was executed, not dropped
    (request,) = model.requests
    # What the provider sees: the final-answer tool, a forced choice, no native output.
    assert [t.name for t in request.tools] == ["lookup", FINAL_ANSWER]
    assert request.tool_choice is not None and request.tool_choice.mode == "any"
    assert request.output is None
    assert [r.content for r in history[-1].tool_results] == ["Rome: 21 C", "Final answer accepted."]
    assert_valid_history(history)


async def test_two_final_answers_the_first_valid_is_taken_and_every_call_is_answered(
    tmp_path: Path,
) -> None:
    finals = {
        "tool_calls": [
            {"name": FINAL_ANSWER, "input": {"city": "Rome"}},
            {"name": FINAL_ANSWER, "input": {"city": "Rome", "temp": 25}},
            {"name": FINAL_ANSWER, "input": {"city": "Milan", "temp": 20}},
        ]
    }
    model = RecordingModel([finals])
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent, output_strategy="tool"), "weather?")
        history = await saved_history(h, finished.run_id)
    assert finished.output == {"city": "Rome", "temp": 25}
    invalid, taken, unused = history[-1].tool_results
    assert invalid.is_error and "'temp' is a required property" in invalid.content
    assert taken.content == "Final answer accepted." and not taken.is_error
    assert unused.is_error and "earlier final_answer call" in unused.content
    assert_valid_history(history)


async def test_the_tool_strategy_retries_an_invalid_final_answer_and_a_prose_answer(
    tmp_path: Path,
) -> None:
    turns = [
        final({"city": "Rome", "temp": "hot"}),
        text("Rome is hot."),
        final({"city": "Rome", "temp": 30}),
    ]
    model = RecordingModel(turns, strict=True)
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent, output_strategy="tool"), "weather?")
    assert finished.status is RunStatus.COMPLETED and finished.output["temp"] == 30
    error = model.requests[1].messages[-1].tool_results[0]
    assert error.is_error and "$.temp: 'hot' is not of type 'number'" in error.content
    assert "calling the final_answer tool" in model.requests[2].messages[-1].text
    assert model.problems == []


async def test_the_prompted_strategy_asks_in_the_system_prompt(tmp_path: Path) -> None:
    model = RecordingModel([text({"city": "Lima", "temp": 18})])
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent, output_strategy="prompted"), "weather?")
    assert finished.output == {"city": "Lima", "temp": 18}
    (request,) = model.requests
    assert request.output is None and request.tools == ()
    assert '"temp": {"type": "number"}' in request.system[-1].text


class NeedsNote:
    """Rewrites the output schema for its calls (requires a note) and rejects a cold answer."""

    name = "needs_note"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        spec = req.request.output
        assert spec is not None
        schema = {
            **spec.schema,
            "properties": {**spec.schema["properties"], "note": {"type": "string"}},
            "required": [*spec.schema["required"], "note"],
        }
        rewritten = attrs.evolve(req.request, output=attrs.evolve(spec, schema=schema))
        response = await next(attrs.evolve(req, request=rewritten))
        proposed = proposed_output(rewritten, response)
        if isinstance(proposed, dict) and proposed.get("temp", 0) < 0:
            return reject_output(response, "below zero is not believable here")
        return response


async def test_a_wrapper_rewrites_the_output_schema_and_rejects_an_output(tmp_path: Path) -> None:
    turns = [
        text({"city": "Quito", "temp": 14}),
        text({"city": "Quito", "temp": -5, "note": "cold"}),
        text({"city": "Quito", "temp": 14, "note": "mild"}),
    ]
    model = RecordingModel(turns)
    async with agent_harness(tmp_path, model=model, stack=[NeedsNote()]) as h:
        finished = await h.run(
            with_output(h.agent, output_schema={**WEATHER, "additionalProperties": True}), "?"
        )
    assert finished.status is RunStatus.COMPLETED
    assert finished.output == {"city": "Quito", "temp": 14, "note": "mild"}
    assert "'note' is a required property" in model.requests[1].messages[-1].text
    assert "below zero is not believable here" in model.requests[2].messages[-1].text
    assert "note" in model.requests[0].output.schema["properties"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"output_schema": {"type": "array"}}, "output_schema: must describe an object"),
        ({"output_schema": {"type": "object", "properties": 3}}, "output_schema: not a valid"),
        ({"output_strategy": "json"}, "$.output_strategy"),
        ({"output_retries": -1}, "$.output_retries"),
        ({"max_tool_concurrency": 0}, "$.max_tool_concurrency"),
        ({"sequential_tools": "deploy"}, "$.sequential_tools"),
    ],
)
def test_bad_output_and_concurrency_keys_are_named_in_one_line(
    changes: dict[str, Any], message: str
) -> None:
    doc = {"name": "a", "model": "scripted:x", **changes}
    with pytest.raises(AgentFileError) as caught:
        AgentDefinition.from_json(doc, source="agent file a.toml")
    assert str(caught.value).startswith("agent file a.toml: ")
    assert message in str(caught.value) and "\n" not in str(caught.value)
