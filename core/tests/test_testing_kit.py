"""hango.testing, the kit every suite uses: the strict rules refuse what Anthropic refuses, the
fake servers answer through the real SDK clients and refuse an invalid history as the API does,
the tool box counts, holds and kills, ``assert_installed`` names what differs, and the pytest
plugin's fixtures reach a session outside this repository through the ``pytest11`` entry point
alone."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

import hango_todo
from hango import (
    Message,
    ModelError,
    Request,
    RunStatus,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.agent.stack import STACK_ORDER
from hango.config import StackConfig
from hango.provider.model import accumulate
from hango.testing import (
    FakeAnthropic,
    FakeOpenAI,
    Killed,
    RecordingModel,
    ToolBox,
    agent_harness,
    anthropic_answer,
    assert_installed,
    history_problems,
    kill_and_resume,
    new_state,
    openai_answer,
    wire_problems,
)

pytestmark = pytest.mark.anyio

box = ToolBox()


@box.tool
def look(path: str, depth: int = 1) -> str:
    """Read something."""
    return f"looked at {path}"


@box.tool(idempotent=False)
async def act(target: str) -> str:
    """Change something."""
    return f"acted on {target}"


CALL = ToolUseBlock("c1", "look", {"path": "a"})
ORPHAN = Message("user", (ToolResultBlock("c9", "late"),))


# -- the strict rules ------------------------------------------------------------------------


def test_history_problems_name_each_broken_rule() -> None:
    assert history_problems([Message.user("hi")]) == []
    assert history_problems([Message("assistant", (TextBlock("hi"),))]) == [
        "the first message (after merging same-role neighbours) is not a user one"
    ]
    unanswered = [Message.user("hi"), Message("assistant", (CALL,))]
    assert history_problems(unanswered) == [
        "messages[1]: tool calls without a result in the next message: ['c1']"
    ]
    assert history_problems(unanswered, open_tail=True) == []
    assert "answers no call of the message before" in history_problems([ORPHAN])[0]


def test_wire_problems_read_a_messages_api_body() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", **CALL_JSON}]},
            {"role": "user", "content": [{"type": "text", "text": " "}]},
        ]
    }
    assert wire_problems(body) == [
        "messages[2] has a blank text block",
        "messages[1]: tool calls without a result in the next message: ['c1']",
    ]
    body["messages"][2]["content"] = [{"type": "tool_result", "tool_use_id": "c1", "content": []}]
    assert wire_problems(body) == []


CALL_JSON = {"id": "c1", "name": "look", "input": {"path": "a"}}


async def test_a_strict_recording_model_refuses_an_invalid_request() -> None:
    model = RecordingModel([{"text": "ok"}, {"text": "again"}], strict=True, name="m")
    good = Request(model="m", messages=(Message.user("hi"),))
    assert (await accumulate(model.stream(good))).message.text == "ok"
    bad = Request(model="m", messages=(Message.user("hi"), Message("assistant", (CALL,))))
    with pytest.raises(ModelError, match="tool calls without a result") as caught:
        await accumulate(model.stream(bad))
    assert caught.value.status == 400 and not caught.value.transient
    assert model.requests == [good, bad] and model.name == "m"
    assert model.problems == [
        "messages[1]: tool calls without a result in the next message: ['c1']"
    ]


# -- the fake servers, through the SDK clients (asyncio only) --------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_fake_anthropic_serves_in_order_and_refuses_what_the_api_refuses() -> None:
    server = FakeAnthropic([anthropic_answer("Hello.", calls=[("t1", "look", {"path": "a"})])])
    model = server.model(max_retries=0)
    ok = Request(model="claude-test", messages=(Message.user("hi"),))
    response = await accumulate(model.stream(ok))
    assert response.message.text == "Hello."
    assert response.message.tool_uses == (ToolUseBlock("t1", "look", {"path": "a"}),)
    bad = Request(model="claude-test", messages=(Message.user("hi"), ORPHAN))
    with pytest.raises(ModelError, match="answers no call") as caught:
        await accumulate(model.stream(bad))
    assert caught.value.status == 400
    assert len(server.requests) == 2 and server.bodies[0]["messages"][0]["role"] == "user"
    assert server.problems == [
        "messages[0, 1]: result for c9 comes after other content",
        "messages[0, 1]: result for c9 answers no call of the message before",
    ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_fake_openai_serves_a_streamed_answer() -> None:
    server = FakeOpenAI([openai_answer("Hi there.")])
    model = server.model()
    response = await accumulate(model.stream(Request(model="g", messages=(Message.user("hi"),))))
    assert response.message.text == "Hi there."
    assert server.bodies[0]["stream"] is True


# -- the tool box ----------------------------------------------------------------------------


async def test_the_tool_box_counts_starts_and_completions(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [{"name": "look", "input": {"depth": 2, "path": "a"}}]},
        {"tool_calls": [{"name": "act", "input": {"target": "b"}}]},
        {"text": "done"},
    ]
    async with agent_harness(tmp_path, turns=turns, tools=[look, act]) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.COMPLETED
    assert box.started == box.executed == box.completed == ["look a 2", "act b"]
    assert box.count("look") == (1, 1)
    assert act.idempotent is False and look("x") == "looked at x"


def test_every_box_is_empty_when_a_test_starts() -> None:
    assert (box.started, box.executed, box.completed) == ([], [], [])


async def test_a_held_tool_waits_for_its_release(tmp_path: Path) -> None:
    hold = box.hold("look")
    turns = [{"tool_calls": [{"name": "look", "input": {"path": "a"}}]}, {"text": "done"}]
    async with (
        agent_harness(tmp_path, turns=turns, tools=[look]) as h,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(h.run, h.agent, "go")
        await hold.entered.wait()
        assert (box.started, box.executed) == (["look a"], [])
        hold.release()
    assert box.completed == ["look a"]


async def test_a_killed_tool_leaves_the_checkpoint_and_the_resume_finishes(tmp_path: Path) -> None:
    box.kill("look")
    turns = [{"tool_calls": [{"name": "look", "input": {"path": "a"}}]}, {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, tools=[look]) as h:
        seen = await kill_and_resume(h.store, lambda _store: h, h.agent, "go", killed_by=Killed)
    assert seen.killed.status is RunStatus.RUNNING
    assert seen.finished.status is RunStatus.COMPLETED
    assert (box.started, box.executed, box.completed) == (
        ["look a", "look a"],
        ["look a"],
        ["look a"],
    )


def test_new_state_holds_the_given_list() -> None:
    messages = [Message.user("hi")]
    state = new_state(messages)
    assert state.messages is messages and new_state().run_id != state.run_id


# -- plugins ---------------------------------------------------------------------------------


def test_assert_installed_returns_the_placement_and_names_a_wrong_distribution() -> None:
    placed = assert_installed("todo", "hango-todo", hango_todo, middleware="todo")
    assert placed.name == "todo"
    with pytest.raises(AssertionError, match="todo comes from"):
        assert_installed("todo", "hango-other", hango_todo, middleware="todo")


def test_assert_installed_places_a_name_of_the_plugins_own_in_the_agent_slot(
    install: Callable[..., None],
) -> None:
    install("hango-shout", "shout", "shout")
    module = importlib.import_module("hangotest_hango_shout")
    config = StackConfig(agent_middleware=("shout",))
    placed = assert_installed("shout", "hango-shout", module, middleware="shout", config=config)
    assert placed.slot == STACK_ORDER.index("agent")
    with pytest.raises(AssertionError, match="only available to agents"):
        assert_installed("shout", "hango-shout", module, middleware="shout")


# -- the pytest plugin, in a session outside the repository ---------------------------------

OUTSIDE = '''
import uuid
import pytest
from hango.testing import ToolBox

box = ToolBox()

@box.tool
def ping(n: int) -> str:
    """Ping."""
    return "pong"

def test_first(tool_box, tenant, database_url):
    box.started.append("ping 1")
    assert isinstance(tool_box, ToolBox) and isinstance(tenant, uuid.UUID)
    print("URL=" + database_url)

def test_second():
    assert box.started == []

def test_cli(agent_dir, hango_cli):
    agent = agent_dir(agent='name = "a"\\nmodel = "scripted:script.toml"\\n',
                      script='[[turns]]\\ntext = "Hi from the kit."\\n')
    done = hango_cli.run("run", "--agent", str(agent), "hello")
    assert done.returncode == 0, done.stderr
    assert "Hi from the kit." in done.stdout
'''


def test_the_plugin_reaches_a_session_outside_the_repository(tmp_path: Path) -> None:
    (tmp_path / "test_outside.py").write_text(textwrap.dedent(OUTSIDE))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-m", "not postgres"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "3 passed, 1 deselected" in out, out
    assert "URL=sqlite:///" in out and "/hango.db" in out
