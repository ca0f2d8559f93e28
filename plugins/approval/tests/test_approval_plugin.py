"""hango-approval: the entry point and options table, the four decisions, edits re-checked
against the tool they now call, the repeat detector after a rejection, predicates, retries
that must not spend an approval twice."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import hango_approval
from hango import (
    ConfigError,
    Decision,
    DecisionRefused,
    RunFinished,
    RunStatus,
    ToolResult,
)
from hango.discovery import check_options
from hango.middleware import StackConfig, ToolCallRequest, ToolHandler
from hango.plugins import make_plugin_manager
from hango.testing import RecordingModel, ToolBox, agent_harness, assert_installed
from hango.testing import saved_history as history
from hango_allowlist import ToolAllowlistMiddleware
from hango_approval import HumanInTheLoopMiddleware, ToolPolicy
from hango_repeat import RepeatCallMiddleware

pytestmark = pytest.mark.anyio

box = ToolBox()
executed = box.executed
flaky: list[bool] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    executed.clear()
    flaky.clear()


@box.tool
def edit_file(path: str, text: str) -> str:
    """Write a file."""
    if flaky and flaky.pop(0):
        raise OSError("disk hiccup")
    return f"wrote {path}"


@box.tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@box.tool
def preview(branch: str) -> str:
    """Deploy a preview."""
    return f"preview of {branch}"


@box.tool
def deploy(env: str) -> str:
    """Deploy for real."""
    return f"deployed to {env}"


TOOLS = [edit_file, read_file, preview, deploy]


def call(name: str, **input: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": input}]}


def only(finished: RunFinished) -> str:
    (action,) = finished.pending
    return action.tool_call_id


# -- the plugin ----------------------------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    options = {"human_in_the_loop": {"interrupt_on": {"edit_file": ["approve", "reject"]}}}
    config = StackConfig(middleware_options=options)
    placed = assert_installed(
        "approval", "hango-approval", hango_approval, middleware="human_in_the_loop", config=config
    )
    assert placed.capabilities == ("tool_wrapper",)
    assert isinstance(placed.middleware, HumanInTheLoopMiddleware)
    assert placed.middleware.policies == {"edit_file": ToolPolicy(("approve", "reject"))}


def test_without_a_table_nothing_is_gated() -> None:
    mw = hango_approval.hango_middleware(config=StackConfig())
    assert mw.policies == {}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"interrupt_on": {"edit_file": ["approve", "maybe"]}},
            "[options.human_in_the_loop].interrupt_on.edit_file",
        ),
        ({"interrupt_on": {"edit_file": []}}, "[options.human_in_the_loop].interrupt_on.edit_file"),
        ({"interrupt_on": {"edit_file": "yes"}}, "interrupt_on.edit_file"),
        ({"when": {"deploy": "no colon"}}, "[options.human_in_the_loop].when.deploy"),
        ({"interrupt_for": {}}, "interrupt_for"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_field(table: dict[str, Any], message: str) -> None:
    options = {"human_in_the_loop": table}
    with pytest.raises(ConfigError) as caught:
        check_options(options, make_plugin_manager(env={}), source="agent 'gated'")
    assert str(caught.value).startswith("agent 'gated': ") and message in str(caught.value)


def test_a_predicate_for_an_ungated_tool_is_refused() -> None:
    options = {"human_in_the_loop": {"interrupt_on": {"deploy": False}, "when": {"deploy": "m:f"}}}
    with pytest.raises(ConfigError, match=r"\[options.human_in_the_loop\]: when.deploy: tool"):
        hango_approval.hango_middleware(
            config=StackConfig(middleware_options=options, source="agent 'gated'")
        )


# -- the decisions -------------------------------------------------------------------------------


async def test_approve_reject_and_respond(tmp_path: Path) -> None:
    batch = {
        "tool_calls": [
            {"name": "edit_file", "input": {"path": "a", "text": "1"}},
            {"name": "read_file", "input": {"path": "a"}},
            {"name": "edit_file", "input": {"path": "b", "text": "2"}},
            {"name": "edit_file", "input": {"path": "c", "text": "3"}},
        ]
    }
    gate = HumanInTheLoopMiddleware({"edit_file": True})
    async with agent_harness(
        tmp_path, turns=[batch, {"text": "ok"}], stack=[gate], tools=TOOLS
    ) as h:
        finished = await h.run(h.agent, "go")
        assert [a.tool_call_id for a in finished.pending] == [
            "toolu_scripted_0_0",
            "toolu_scripted_0_2",
            "toolu_scripted_0_3",
        ]
        assert all(
            a.decisions == ("approve", "edit", "reject", "respond") for a in finished.pending
        )
        assert executed == []
        done = await h.resume(
            finished.run_id,
            {
                "toolu_scripted_0_0": Decision.approve(),
                "toolu_scripted_0_2": Decision.reject("Not that file."),
                "toolu_scripted_0_3": Decision.respond("c is already written."),
            },
        )
        assert done.status is RunStatus.COMPLETED
        assert executed == ["edit_file a 1", "read_file a"]
        results = [
            (r.content, r.is_error) for r in (await history(h, finished.run_id))[2].tool_results
        ]
        assert results == [
            ("wrote a", False),
            ("contents of a", False),
            ("Rejected by a person: Not that file. The call did not run.", True),
            ("c is already written.", False),
        ]


async def test_an_edit_runs_once_and_the_model_sees_how_it_ran(tmp_path: Path) -> None:
    # langchain#33787: after an edit the model saw its original arguments answered and asked
    # again. Here the original never runs and the result says what ran instead.
    model = RecordingModel([call("edit_file", path="a", text="draft"), {"text": "done"}])
    gate = HumanInTheLoopMiddleware({"edit_file": ["approve", "edit", "reject"]})
    async with agent_harness(tmp_path, model=model, stack=[gate], tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
        edited = Decision.edit({"path": "a", "text": "final"})
        done = await h.resume(finished.run_id, {only(finished): edited})
    assert done.status is RunStatus.COMPLETED
    assert executed == ["edit_file a final"]
    last = model.requests[-1].messages
    (result,) = last[-1].tool_results
    assert result.content == (
        '[A person edited this call before it ran. It ran as: edit_file {"path": "a", '
        '"text": "final"}]\nwrote a'
    )
    # The history keeps the model's own call, answered once.
    assert last[-2].tool_uses[0].input == {"path": "a", "text": "draft"}


async def test_an_edit_into_another_tool_is_checked_against_that_tools_policy(
    tmp_path: Path,
) -> None:
    # langchain#40166: editing a call into another tool skipped that tool's gate.
    gate = HumanInTheLoopMiddleware(
        {"preview": ["approve", "edit", "reject"], "deploy": ["approve", "reject"]}
    )
    turns = [call("preview", branch="main"), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
        call_id = only(finished)
        into_deploy = Decision.edit({"env": "prod"}, tool="deploy")
        asked = await h.resume(finished.run_id, {call_id: into_deploy})
        assert asked.status is RunStatus.SUSPENDED
        (again,) = asked.pending
        assert (again.tool_call_id, again.tool, again.input) == (call_id, "deploy", {"env": "prod"})
        assert again.decisions == ("approve", "reject")
        assert executed == []
        assert again.reasked  # a second question about the call: answered by its own id
        with pytest.raises(DecisionRefused, match="'edit' is not allowed"):
            await h.decide(finished.run_id, {again.id: Decision.edit({"env": "dev"})})
        # The same edit sent twice is refused, not taken as an answer to the new question.
        with pytest.raises(DecisionRefused, match=f"name the question: --edit {again.id}"):
            await h.decide(finished.run_id, {call_id: into_deploy})

        done = await h.resume(finished.run_id, {again.id: Decision.approve()})
        assert done.status is RunStatus.COMPLETED
        assert executed == ["deploy prod"]
        (result,) = (await history(h, finished.run_id))[2].tool_results
        assert result.content.endswith('It ran as: deploy {"env": "prod"}]\ndeployed to prod')


async def test_an_edit_into_a_banned_tool_is_refused_by_the_allowlist(tmp_path: Path) -> None:
    stack = [HumanInTheLoopMiddleware({"preview": True}), ToolAllowlistMiddleware({"preview"})]
    turns = [call("preview", branch="main"), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=stack, tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
        into = Decision.edit({"env": "prod"}, tool="deploy")
        assert (
            await h.resume(finished.run_id, {only(finished): into})
        ).status is RunStatus.COMPLETED
        (result,) = (await history(h, finished.run_id))[2].tool_results
    assert executed == []
    assert result.is_error and "Refused: tool 'deploy' is not allowed" in result.content


async def test_edits_that_keep_moving_between_gated_tools_end(tmp_path: Path) -> None:
    gate = HumanInTheLoopMiddleware({"preview": True, "deploy": True})
    turns = [call("preview", branch="main"), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
        call_id = only(finished)
        moves = [
            Decision.edit({"env": "a"}, tool="deploy"),
            Decision.edit({"branch": "b"}, tool="preview"),
            Decision.edit({"env": "c"}, tool="deploy"),
            Decision.edit({"branch": "d"}, tool="preview"),
        ]
        outcome = finished
        for move in moves:
            # Each move asks a new question about the call, answered by its id.
            (question,) = outcome.pending
            key = question.id if question.reasked else call_id
            outcome = await h.resume(finished.run_id, {key: move})
        assert outcome.status is RunStatus.COMPLETED
        (result,) = (await history(h, finished.run_id))[2].tool_results
    assert executed == []
    assert result.is_error and "edited into another gated tool 3 times" in result.content


async def test_after_a_rejection_a_repeated_call_is_asked_again_then_blocked(
    tmp_path: Path,
) -> None:
    same = call("deploy", env="prod")
    turns = [same, same, same, {"text": "I'll stop."}]
    stack = [RepeatCallMiddleware(threshold=3), HumanInTheLoopMiddleware({"deploy": True})]
    async with agent_harness(tmp_path, turns=turns, stack=stack, tools=TOOLS) as h:
        first = await h.run(h.agent, "go")
        # The rejection is not a standing answer: the same call is asked about again.
        second = await h.resume(first.run_id, {only(first): Decision.reject("no")})
        assert second.status is RunStatus.SUSPENDED
        assert only(second) != only(first)
        # The repeat detector counts each rejected call once; the third one is blocked without
        # asking anyone.
        done = await h.resume(first.run_id, {only(second): Decision.reject("still no")})
        assert done.status is RunStatus.COMPLETED
        results = [m.tool_results[0] for m in await history(h, first.run_id) if m.tool_results]
    assert executed == []
    assert [r.content.split(":")[0] for r in results] == [
        "Rejected by a person",
        "Rejected by a person",
        "Not executed",
    ]


def prod_only(arguments: dict[str, Any]) -> bool:
    return arguments["env"] == "prod"


def broken(arguments: dict[str, Any]) -> bool:
    raise KeyError("oops")


@pytest.mark.parametrize("when", [prod_only, "approval_policies:prod_only"])
async def test_a_predicate_decides_which_calls_are_asked(
    tmp_path: Path, when: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "approval_policies.py").write_text(
        "def prod_only(arguments):\n    return arguments['env'] == 'prod'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "approval_policies", raising=False)
    turns = [
        {
            "tool_calls": [
                {"name": "deploy", "input": {"env": "staging"}},
                {"name": "deploy", "input": {"env": "prod"}},
            ]
        },
        {"text": "done"},
    ]
    gate = HumanInTheLoopMiddleware({"deploy": True}, when={"deploy": when})
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
    assert [a.input for a in finished.pending] == [{"env": "prod"}]
    assert executed == ["deploy staging"]


async def test_a_predicate_that_fails_asks(tmp_path: Path) -> None:
    gate = HumanInTheLoopMiddleware({"deploy": True}, when={"deploy": broken})
    turns = [call("deploy", env="staging"), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.SUSPENDED and executed == []


class Retry:
    """Calls next again when the result is an error (a retry middleware)."""

    name = "retry"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        result = await next(req)
        return await next(req) if result.is_error else result


@pytest.mark.parametrize("outer", [True, False], ids=["retry_outside", "retry_inside"])
async def test_a_retry_never_spends_an_approval_twice(tmp_path: Path, outer: bool) -> None:
    # pydantic-ai#5536: one approval, one question, one record; the retry of the approved call
    # runs on that approval, and the next identical call is asked again.
    flaky[:] = [True, False]
    gate = HumanInTheLoopMiddleware({"edit_file": True})
    stack: list[Any] = [Retry(), gate] if outer else [gate, Retry()]
    same = call("edit_file", path="a", text="1")
    async with agent_harness(tmp_path, turns=[same, same], stack=stack, tools=TOOLS) as h:
        finished = await h.run(h.agent, "go")
        again = await h.resume(finished.run_id, {only(finished): Decision.approve()})
        assert executed == ["edit_file a 1", "edit_file a 1"]
        assert again.status is RunStatus.SUSPENDED and only(again) != only(finished)
        run = await h.store.get_run(h.tenant_id, finished.run_id)
    decided = run.state["interrupts"]["decided"]  # type: ignore[index]
    assert [(d["tool_call_id"], d["decision"]["type"]) for d in decided] == [
        (only(finished), "approve")
    ]
