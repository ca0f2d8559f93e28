"""Tool timeouts: a call past its timeout is cancelled and answered with an error result, its
siblings and the run go on; a sync function that ignores cancellation is abandoned in its
thread (and counted until it returns); the agent's ``tool_timeouts`` beats a tool's own
``timeout``, which beats the agent's ``tool_timeout``; bad values are refused in one line."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import anyio
import attrs
import pytest

from hango import AgentDefinition, Message, RunStatus, tool
from hango.agent.definition import AgentFileError
from hango.testing import HangoCli, agent_harness, saved_history, write_agent
from hango.tool.function import abandoned_calls

pytestmark = pytest.mark.anyio


@tool
async def wait(seconds: float) -> str:
    """Wait ``seconds``."""
    await anyio.sleep(seconds)
    return f"waited {seconds}"


@tool(timeout=5)
async def patient(seconds: float) -> str:
    """Wait ``seconds``; may take 5 s."""
    await anyio.sleep(seconds)
    return f"patient {seconds}"


@tool(timeout=5)
async def reined(seconds: float) -> str:
    """Wait ``seconds``; may take 5 s, unless the agent says otherwise."""
    await anyio.sleep(seconds)
    return f"reined {seconds}"


woken = threading.Event()


@tool(timeout=0.2)
def stubborn(seconds: float) -> str:
    """Block in a sync function until the test lets it go (at most ``seconds``), deaf to
    cancellation."""
    woken.wait(seconds)
    return "woke"


def _calls(*calls: tuple[str, float]) -> list[dict[str, object]]:
    return [
        {"tool_calls": [{"name": n, "input": {"seconds": s}} for n, s in calls]},
        {"text": "done"},
    ]


def _results(history: list[Message]) -> dict[str, tuple[str, bool]]:
    names = {u.id: u.name for m in history for u in m.tool_uses}
    return {names[r.tool_use_id]: (r.content, r.is_error) for m in history for r in m.tool_results}


async def test_a_call_past_its_timeout_gets_an_error_and_its_sibling_and_the_run_go_on(
    tmp_path: Path,
) -> None:
    turns = _calls(("wait", 30), ("patient", 0.3))
    async with agent_harness(tmp_path, turns=turns, tools=[wait, patient]) as h:
        h.agent = attrs.evolve(h.agent, tool_timeout=0.5)
        started = time.monotonic()
        finished = await h.run(h.agent, "go")
        took = time.monotonic() - started
        history = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    results = _results(history)
    content, is_error = results["wait"]
    assert is_error and "did not finish within 0.5 s" in content, content
    assert results["patient"] == ("patient 0.3", False)
    assert took < 20  # not the 30 s the call asked for


async def test_the_agents_per_tool_timeout_beats_the_tools_own_which_beats_the_agents_default(
    tmp_path: Path,
) -> None:
    # wait: the agent's 0.3 s; patient: its own 5 s; reined: its own 5 s, the agent's 0.3 s.
    turns = _calls(("wait", 1.5), ("patient", 1.5), ("reined", 1.5))
    async with agent_harness(tmp_path, turns=turns, tools=[wait, patient, reined]) as h:
        h.agent = attrs.evolve(h.agent, tool_timeout=0.3, tool_timeouts={"reined": 0.3})
        finished = await h.run(h.agent, "go")
        results = _results(await saved_history(h, finished.run_id))
    assert {name: is_error for name, (_, is_error) in results.items()} == {
        "wait": True,
        "patient": False,
        "reined": True,
    }
    assert "within 0.3 s" in results["reined"][0]


async def test_a_sync_tool_deaf_to_cancellation_is_abandoned_and_counted_until_it_returns(
    tmp_path: Path,
) -> None:
    woken.clear()
    async with agent_harness(tmp_path, turns=_calls(("stubborn", 30)), tools=[stubborn]) as h:
        finished = await h.run(h.agent, "go")
        results = _results(await saved_history(h, finished.run_id))
    assert finished.status is RunStatus.COMPLETED
    assert results["stubborn"][1] and "within 0.2 s" in results["stubborn"][0]
    # Still blocked in its thread, and counted (with what earlier tests of this process left).
    counted = abandoned_calls()
    assert counted >= 1
    woken.set()
    with anyio.fail_after(20):
        while abandoned_calls() > counted - 1:  # noqa: ASYNC110 - a thread of its own
            await anyio.sleep(0.05)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("tool_timeout = 0", "$.tool_timeout"),
        ("tool_timeout = -5", "$.tool_timeout"),
        ('tool_timeout = "5"', "$.tool_timeout"),
        ("tool_timeouts = { deploy = 0 }", "$.tool_timeouts.deploy"),
        ('tool_timeouts = { deploy = "long" }', "$.tool_timeouts.deploy"),
    ],
)
def test_a_bad_timeout_in_the_agent_file_is_one_line_naming_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f'name = "t"\nmodel = "scripted:s.toml"\n{line}\n')
    with pytest.raises(AgentFileError) as caught:
        AgentDefinition.from_file(path)
    message = str(caught.value)
    assert message.startswith(f"agent file {path}: {field}: "), message
    assert "\n" not in message


def test_a_tool_timeout_that_is_not_positive_is_refused_at_decoration() -> None:
    with pytest.raises(ValueError, match="tool late: timeout must be a positive number"):

        @tool(timeout=0)
        def late() -> str:
            """Late."""
            return ""


def test_the_timeouts_are_stored_with_the_agent(tmp_path: Path) -> None:
    agent = AgentDefinition("t", "scripted:s.toml", tool_timeout=60, tool_timeouts={"x": 5})
    again = AgentDefinition.from_json(agent.to_json())
    assert (again.tool_timeout, dict(again.tool_timeouts)) == (60, {"x": 5})


STUCK = '''
import time

from hango import tool


@tool
def stuck() -> str:
    """Block for two minutes, deaf to cancellation."""
    time.sleep(120)
    return "woke"
'''


def test_hango_run_ends_with_the_run_although_a_timed_out_tool_still_blocks(
    tmp_path: Path,
) -> None:
    """The abandoned thread is no daemon: a normal interpreter exit would wait 120 s for it."""
    write_agent(
        tmp_path,
        agent='name = "t"\nmodel = "scripted:script.toml"\ntools = ["stuck_tools:stuck"]\n'
        "tool_timeout = 1\n",
        script='[[turns]]\ntool_calls = [{ name = "stuck", input = {} }]\n'
        '[[turns]]\ntext = "Gave up on it."\n',
        tools={"stuck_tools": STUCK},
    )
    done = HangoCli(tmp_path).run("run", "--agent", "agent.toml", "go", "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
