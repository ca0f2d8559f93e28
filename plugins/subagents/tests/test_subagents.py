"""An on-disk lead agent with a researcher sub-agent, for the hango-subagents tests.

``team(folder, lead=[...], researcher=[...])`` writes ``agent.toml`` (the lead, which may
delegate to ``researcher`` and ``general-purpose``), ``researcher.toml`` and their scripts
(lists of turns, as ``ScriptedModel`` reads them) and ``team_tools.py``, whose tools append one
line per execution to ``executions.log`` beside them: the counts are the tools' own. Each team
gets its own module name, since a process imports a module of one name once.
"""

from __future__ import annotations

import json
import shutil
import signal
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hango.testing import write_agent

TOOLS = '''
"""Tools of the sub-agent tests: each execution is one line of executions.log."""

import os
import signal
from pathlib import Path

import anyio

from hango import tool

HERE = Path(__file__).parent


def note(line: str) -> None:
    with (HERE / "executions.log").open("a") as f:
        f.write(line + "\\n")


@tool
async def look(label: str) -> str:
    """Look something up (a label "slow" waits until the file "go" exists)."""
    note(f"look {label}")
    while label == "slow" and not (HERE / "go").exists():
        await anyio.sleep(0.02)
    return f"looked up {label}"


@tool(idempotent=False)
def write(label: str) -> str:
    """Write something (must happen once)."""
    note(f"write {label}")
    if os.environ.get("KILL_AT") == f"write {label}":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"wrote {label}"


@tool
async def meet(label: str) -> str:
    """Wait (up to 20 s) until another call of meet has started too: "met" when one did."""
    note(f"meet {label}")
    with anyio.move_on_after(20):
        while (HERE / "executions.log").read_text().count("meet ") < 2:
            await anyio.sleep(0.02)
        return "met"
    return "alone"


TOOLS = [look, write, meet]
'''

LEAD = """
name = "lead"
model = "scripted:lead.json"
system = ["You lead; delegate research."]
tools = ["{tools}:TOOLS"]
max_turns = 6
[options.subagent]
general_purpose = true
max_report_chars = {max_report_chars}
[[options.subagent.agents]]
name = "researcher"
description = "Finds facts and reports them with their sources."
agent = "researcher.toml"
"""

RESEARCHER = """
name = "researcher"
model = "scripted:researcher.json"
system = ["You research and report."]
tools = ["{tools}:TOOLS"]
max_turns = 6
{extra}
"""


def task(call_id: str, description: str, subagent_type: str = "researcher") -> dict[str, Any]:
    return {
        "id": call_id,
        "name": "task",
        "input": {"description": description, "subagent_type": subagent_type},
    }


def call(call_id: str, name: str, label: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "input": {"label": label}}


def team(
    folder: Path,
    *,
    lead: Sequence[dict[str, Any]],
    researcher: Sequence[dict[str, Any]],
    max_report_chars: int = 20_000,
    researcher_extra: str = "",
) -> Path:
    """Write the team into ``folder``; returns the lead's agent file."""
    tools = f"team_tools_{uuid.uuid4().hex}"
    return write_agent(
        folder,
        agent=LEAD.format(max_report_chars=max_report_chars, tools=tools),
        tools={tools: TOOLS},
        files={
            "researcher.toml": RESEARCHER.format(extra=researcher_extra, tools=tools),
            "lead.json": json.dumps({"turns": list(lead)}),
            "researcher.json": json.dumps({"turns": list(researcher)}),
        },
    )


def executions(folder: Path) -> Counter[str]:
    """How many times each tool body ran (``"write r1" -> 1``)."""
    log = folder / "executions.log"
    return Counter(log.read_text().splitlines() if log.exists() else [])


# --- delegation: the child run, its report, the task result ---------------------------------

import anyio  # noqa: E402
import pytest  # noqa: E402

import hango_subagents  # noqa: E402
from hango import (  # noqa: E402
    AgentDefinition,
    Decision,
    Harness,
    RunStatus,
    RunStore,
    ToolResultBlock,
)
from hango.middleware import StackConfig  # noqa: E402
from hango.testing import (  # noqa: E402
    CLI_TENANT,
    HangoCli,
    Killed,
    assert_installed,
    assert_valid_history,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's pool runs on asyncio only; the runner itself is covered on trio by core's tests.
    return "asyncio"


REPORT = "REPORT: the limit is 42 (source: limits.md)."


def results(messages: Sequence[Any]) -> dict[str, ToolResultBlock]:
    return {b.tool_use_id: b for m in messages for b in m.content if isinstance(b, ToolResultBlock)}


async def run_lead(store: RunStore, tenant: uuid.UUID, agent_file: Path) -> Any:
    harness = Harness(store, tenant_id=tenant)
    return await harness.run(AgentDefinition.from_file(agent_file), "Find the limit.")


def test_installed_through_entry_point() -> None:
    config = StackConfig(middleware_options={"subagent": {"general_purpose": True}})
    placed = assert_installed(
        "subagent", "hango-subagents", hango_subagents, middleware="subagent", config=config
    )
    assert placed.capabilities == ("tool_wrapper", "run_hook", "tool_provider")


async def test_a_delegation_is_a_child_run_whose_report_is_the_task_result(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    agent_file = team(
        tmp_path,
        lead=[{"tool_calls": [task("t1", "Find the limit in limits.md.")]}, {"text": "42."}],
        researcher=[{"tool_calls": [call("r1", "look", "limits")]}, {"text": REPORT}],
    )
    finished = await run_lead(store, tenant, agent_file)
    assert finished.status is RunStatus.COMPLETED, finished.error

    (child,) = await store.child_runs(tenant, finished.run_id)
    assert (child.parent_run_id, child.parent_tool_call_id) == (finished.run_id, "t1")
    assert child.status is RunStatus.COMPLETED
    parent = await store.get_run(tenant, finished.run_id)
    assert child.session_id != parent.session_id  # a fresh history, not the parent's
    # Its own model and stack, from its own agent file.
    assert child.config["model"] == "scripted:researcher.json"
    assert (await store.get_agent(tenant, child.agent_id)).name == "researcher"

    child_history = await store.load_messages(tenant, child.session_id)
    assert child_history[0].text == "Find the limit in limits.md."
    assert child_history[-1].text == REPORT
    lead_history = await store.load_messages(tenant, parent.session_id)
    assert results(lead_history)["t1"].content == REPORT
    assert executions(tmp_path) == {"look limits": 1}
    # The child's tool result stays in the child's history; nothing of it reached the lead's.
    assert "r1" not in results(lead_history)


async def test_a_long_report_is_bounded_and_stays_whole_with_the_child(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    long_report = "fact " * 20_480  # 100 kB
    agent_file = team(
        tmp_path,
        lead=[{"tool_calls": [task("t1", "Collect every fact.")]}, {"text": "Done."}],
        researcher=[{"text": long_report}],
        max_report_chars=1000,
    )
    finished = await run_lead(store, tenant, agent_file)
    assert finished.status is RunStatus.COMPLETED, finished.error
    (child,) = await store.child_runs(tenant, finished.run_id)
    parent = await store.get_run(tenant, finished.run_id)
    result = results(await store.load_messages(tenant, parent.session_id))["t1"].content
    assert result.startswith(long_report[:1000])
    assert len(result) < 1300
    assert f"cut at 1000 of {len(long_report)} characters" in result
    assert str(child.id) in result
    assert (await store.load_messages(tenant, child.session_id))[-1].text == long_report


async def test_general_purpose_runs_the_parents_agent_without_task(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    # The lead's own script serves the general-purpose child too: its first turn (a task call)
    # would fail there, since at depth 1 the child has no task tool.
    agent_file = team(
        tmp_path,
        lead=[
            {"tool_calls": [task("t1", "Look it up.", "general-purpose")]},
            {"text": "child or lead done"},
        ],
        researcher=[],
    )
    finished = await run_lead(store, tenant, agent_file)
    assert finished.status is RunStatus.COMPLETED, finished.error
    (child,) = await store.child_runs(tenant, finished.run_id)
    assert (await store.get_agent(tenant, child.agent_id)).name == "lead"
    history = await store.load_messages(tenant, child.session_id)
    assert results(history)["t1"].is_error  # task is unknown one level down


# --- crashes: a finished child is never run again, an interrupted one continues --------------


class KillAfterTask:
    """Outside the sub-agent middleware: once a task call returned (its child finished and
    saved), ends the process's run before the lead saves the result, as a kill -9 there
    would."""

    name = "kill_after_task"

    def __init__(self, armed: bool) -> None:
        self.armed = armed

    async def wrap_tool_call(self, req: Any, next: Any) -> Any:
        result = await next(req)
        if self.armed and req.call.name == "task":
            raise Killed
        return result


def killing(store: RunStore, tenant: uuid.UUID, *, armed: bool) -> Harness:
    def stack(config: StackConfig) -> list[Any]:
        found = hango_subagents.catalog(config, config.options("subagent"))
        return [KillAfterTask(armed), hango_subagents.SubagentMiddleware(found)]

    return Harness(store, tenant_id=tenant, stack=stack)


async def test_a_child_that_finished_before_the_crash_is_not_run_again(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    agent_file = team(
        tmp_path,
        lead=[{"tool_calls": [task("t1", "Write it down.")]}, {"text": "Written."}],
        researcher=[{"tool_calls": [call("r1", "write", "notes")]}, {"text": REPORT}],
    )
    first = killing(store, tenant, armed=True)
    run = await first.start(AgentDefinition.from_file(agent_file), "Write it down.")
    with pytest.raises(Killed):
        await first.execute(run.id)
    (child,) = await store.child_runs(tenant, run.id)
    assert child.status is RunStatus.COMPLETED
    assert (await store.get_run(tenant, run.id)).status is RunStatus.RUNNING
    child_version = child.version

    finished = await killing(store, tenant, armed=False).execute(run.id)
    assert finished.status is RunStatus.COMPLETED, finished.error
    (again,) = await store.child_runs(tenant, run.id)
    # The same child, untouched: its tool ran once, its report was reused.
    assert (again.id, again.version) == (child.id, child_version)
    assert executions(tmp_path) == {"write notes": 1}
    lead = await store.get_run(tenant, run.id)
    lead_history = await store.load_messages(tenant, lead.session_id)
    assert results(lead_history)["t1"].content == REPORT
    # One task call: the model was not made to delegate again.
    assert sum(1 for m in lead_history for u in m.tool_uses if u.name == "task") == 1
    assert_valid_history(lead_history)


async def test_kill_9_inside_the_childs_tool_continues_the_child_on_resume(
    tmp_path: Path,
) -> None:
    team(
        tmp_path,
        lead=[{"tool_calls": [task("t1", "Write it down.")]}, {"text": "Written."}],
        researcher=[{"tool_calls": [call("r1", "write", "notes")]}, {"text": REPORT}],
    )
    cli = HangoCli(tmp_path)
    done = cli.run("run", "--agent", "agent.toml", "Go.", env={"KILL_AT": "write notes"})
    assert done.returncode == -signal.SIGKILL, done.stderr
    (child, lead) = await cli.runs()  # newest first
    assert lead.parent_run_id is None and child.parent_run_id == lead.id
    assert (lead.status, child.status) == (RunStatus.RUNNING, RunStatus.RUNNING)

    resumed = cli.run("resume", "--force", str(lead.id))
    assert resumed.returncode == 0, resumed.stderr
    async with cli.store() as store:
        lead = await store.get_run(CLI_TENANT, lead.id)
        child = await store.get_run(CLI_TENANT, child.id)
        assert (lead.status, child.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
        assert [c.id for c in await store.child_runs(CLI_TENANT, lead.id)] == [child.id]
        child_history = await store.load_messages(CLI_TENANT, child.session_id)
        lead_history = await store.load_messages(CLI_TENANT, lead.session_id)
    # The write started before the kill: never run again, the child told its outcome is
    # unknown, and it went on from its own checkpoint to its report.
    assert executions(tmp_path) == {"write notes": 1}
    assert results(child_history)["r1"].is_error
    assert results(lead_history)["t1"].content == REPORT
    assert_valid_history(child_history)
    assert_valid_history(lead_history)


# --- an approval inside a child suspends the parent ------------------------------------------

GATED = """
[options.human_in_the_loop]
interrupt_on = { write = true }
"""


@pytest.mark.parametrize(
    ("decision", "child_result"),
    [
        (Decision.approve(), "wrote notes"),
        (Decision.edit({"label": "edited"}), "wrote edited"),
        (Decision.reject("Not now."), "Not now."),
        (Decision.respond("Pretend it is written."), "Pretend it is written."),
    ],
    ids=["approve", "edit", "reject", "respond"],
)
async def test_an_approval_inside_a_child_suspends_the_parent_and_resumes_both(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path, decision: Decision, child_result: str
) -> None:
    agent_file = team(
        tmp_path,
        lead=[
            {
                "tool_calls": [
                    call("p1", "look", "before"),
                    task("t1", "Write the notes."),
                    call("p2", "look", "after"),
                ]
            },
            {"text": "All done."},
        ],
        researcher=[{"tool_calls": [call("r1", "write", "notes")]}, {"text": REPORT}],
        researcher_extra=GATED,
    )
    harness = Harness(store, tenant_id=tenant)
    first = await harness.run(AgentDefinition.from_file(agent_file), "Go.")
    assert first.status is RunStatus.SUSPENDED, first.error
    (question,) = first.pending
    assert question.tool_call_id == "t1" and question.middleware == "subagent"
    (child,) = await store.child_runs(tenant, first.run_id)
    assert child.status is RunStatus.SUSPENDED
    assert isinstance(question.request, dict)
    assert question.request["child_run_id"] == str(child.id)
    assert [p["tool_call_id"] for p in question.request["pending"]] == ["r1"]
    # Both siblings ran (the one after the task beside the child's run); nothing was written.
    assert executions(tmp_path) == {"look before": 1, "look after": 1}

    # A new process decides the child's call through the parent; no sibling runs again.
    finished = await Harness(store, tenant_id=tenant).resume(first.run_id, {"r1": decision})
    assert finished.status is RunStatus.COMPLETED, finished.error
    expected = {"look before": 1, "look after": 1}
    if decision.type in ("approve", "edit"):
        expected[child_result.replace("wrote", "write")] = 1
    assert executions(tmp_path) == expected
    child = await store.get_run(tenant, child.id)
    assert child.status is RunStatus.COMPLETED
    child_history = await store.load_messages(tenant, child.session_id)
    assert child_result in results(child_history)["r1"].content
    lead = await store.get_run(tenant, first.run_id)
    lead_history = await store.load_messages(tenant, lead.session_id)
    assert results(lead_history)["t1"].content == REPORT
    assert_valid_history(lead_history)
    assert_valid_history(child_history)


# --- two delegations in one batch ------------------------------------------------------------

SCRIBE = """
[[options.subagent.agents]]
name = "scribe"
description = "Writes things down without asking."
agent = "scribe.toml"
"""


def add_scribe(folder: Path) -> None:
    """A second, ungated sub-agent ``scribe`` for the team in ``folder``."""
    tools = next(p.stem for p in folder.glob("team_tools_*.py"))
    (folder / "agent.toml").write_text((folder / "agent.toml").read_text() + SCRIBE)
    (folder / "scribe.toml").write_text(
        f'name = "scribe"\nmodel = "scripted:scribe.json"\ntools = ["{tools}:TOOLS"]\n'
    )
    turns = [{"tool_calls": [call("s1", "write", "log")]}, {"text": "SCRIBE: logged."}]
    (folder / "scribe.json").write_text(json.dumps({"turns": turns}))


async def test_two_children_of_one_batch_one_suspends_the_others_result_is_kept(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    agent_file = team(
        tmp_path,
        lead=[
            {
                "tool_calls": [
                    task("t1", "Write the log.", "scribe"),
                    task("t2", "Write the notes.", "researcher"),
                ]
            },
            {"text": "Both done."},
        ],
        researcher=[{"tool_calls": [call("r1", "write", "notes")]}, {"text": REPORT}],
        researcher_extra=GATED,
    )
    add_scribe(tmp_path)
    harness = Harness(store, tenant_id=tenant)
    first = await harness.run(AgentDefinition.from_file(agent_file), "Go.")
    assert first.status is RunStatus.SUSPENDED, first.error
    assert [p.tool_call_id for p in first.pending] == ["t2"]
    by_call = {c.parent_tool_call_id: c for c in await store.child_runs(tenant, first.run_id)}
    assert by_call["t1"].status is RunStatus.COMPLETED
    assert by_call["t2"].status is RunStatus.SUSPENDED
    # Separate runs, separate sessions: nothing shared between the two children.
    assert by_call["t1"].session_id != by_call["t2"].session_id
    scribe_version = by_call["t1"].version

    finished = await Harness(store, tenant_id=tenant).resume(
        first.run_id, {"r1": Decision.approve()}
    )
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert executions(tmp_path) == {"write log": 1, "write notes": 1}
    again = {c.parent_tool_call_id: c for c in await store.child_runs(tenant, first.run_id)}
    assert again["t1"].version == scribe_version  # kept, never run again
    lead = await store.get_run(tenant, first.run_id)
    history = await store.load_messages(tenant, lead.session_id)
    answered = [b for m in history for b in m.content if isinstance(b, ToolResultBlock)]
    # In call order, each with its own child's report.
    assert [(b.tool_use_id, b.content) for b in answered] == [
        ("t1", "SCRIBE: logged."),
        ("t2", REPORT),
    ]
    assert_valid_history(history)


async def test_two_delegations_of_one_batch_run_at_the_same_time(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    """Each child's tool waits for the other's to start: one after the other, both would
    wait out their 20 s and say "alone"."""
    agent_file = team(
        tmp_path,
        lead=[
            {"tool_calls": [task("t1", "Meet one."), task("t2", "Meet two.")]},
            {"text": "Both met."},
        ],
        researcher=[{"tool_calls": [call("m1", "meet", "x")]}, {"text": "MET"}],
    )
    finished = await run_lead(store, tenant, agent_file)
    assert finished.status is RunStatus.COMPLETED, finished.error
    children = await store.child_runs(tenant, finished.run_id)
    assert len(children) == 2 and len({c.session_id for c in children}) == 2
    for child in children:
        history = await store.load_messages(tenant, child.session_id)
        assert results(history)["m1"].content == "met"
    lead = await store.get_run(tenant, finished.run_id)
    history = await store.load_messages(tenant, lead.session_id)
    assert [(k, r.content) for k, r in results(history).items()] == [("t1", "MET"), ("t2", "MET")]


# --- the example, as its README runs it ------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "subagents"


async def test_the_example_suspends_the_lead_and_one_approval_completes_both(
    tmp_path: Path, database_url: str
) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "example")
    workspace = tmp_path / "workspace"
    tenant = uuid.uuid4()  # the PostgreSQL database is shared by the session's tests
    cli = HangoCli(
        tmp_path,
        database_url=database_url,
        env={"SUBAGENTS_DEMO_WORKSPACE": str(workspace), "HANGO_TENANT": str(tenant)},
    )
    done = cli.run("run", "--agent", "example/agent.toml", "Write up the project's limits.")
    assert done.returncode == 3, done.stderr  # a suspended run exits 3
    assert "research_write_1" in done.stdout
    (child, lead) = await cli.runs(tenant)
    assert child.parent_run_id == lead.id

    shown = json.loads(cli.run("runs", "show", "--json", str(lead.id)).stdout)
    assert [c["run_id"] for c in shown["children"]] == [str(child.id)]
    assert shown["children"][0]["parent_tool_call_id"] == "lead_task_1"
    (question,) = shown["pending"]
    # The path to the child's question: parent call id, child run id, child call id.
    assert question["tool_call_id"] == "lead_task_1"
    assert question["request"]["child_run_id"] == str(child.id)
    assert [p["tool_call_id"] for p in question["request"]["pending"]] == ["research_write_1"]
    assert not (workspace / "writes.log").exists()

    resumed = cli.run("resume", str(lead.id), "--approve", "research_write_1")
    assert resumed.returncode == 0, resumed.stderr
    assert (workspace / "writes.log").read_text() == "write_findings\n"
    assert "Limits: 42" in (workspace / "findings.md").read_text()
    # Listed under its lead, the child being the newer.
    listed = cli.run("runs", "list").stdout.splitlines()
    assert [line.split("\t")[0] for line in listed] == [str(lead.id), str(child.id)]
    tree = cli.run("runs", "show", str(lead.id)).stdout
    assert f"task call lead_task_1 -> child run {child.id}  researcher  completed" in tree
    (child, lead) = await cli.runs(tenant)
    assert (lead.status, child.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)


# --- budgets and failures ----------------------------------------------------------------


async def test_the_childs_usage_is_rolled_up_and_a_failed_child_is_an_error_naming_it(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    agent_file = team(
        tmp_path,
        lead=[
            {
                "tool_calls": [task("t1", "Report."), task("t2", "Loop.", "scribe")],
                "usage": {"input_tokens": 100, "output_tokens": 10},
            },
            {"text": "Done.", "usage": {"input_tokens": 200, "output_tokens": 20}},
        ],
        researcher=[{"text": REPORT, "usage": {"input_tokens": 7, "output_tokens": 3}}],
    )
    add_scribe(tmp_path)
    # The scribe's own file sets its budget: one turn, which its tool call uses up.
    scribe = tmp_path / "scribe.toml"
    scribe.write_text(scribe.read_text() + "max_turns = 1\n")
    finished = await run_lead(store, tenant, agent_file)
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert (finished.usage.input_tokens, finished.usage.output_tokens) == (307, 33)
    by_call = {c.parent_tool_call_id: c for c in await store.child_runs(tenant, finished.run_id)}
    assert by_call["t2"].status is RunStatus.FAILED
    lead = await store.get_run(tenant, finished.run_id)
    failed = results(await store.load_messages(tenant, lead.session_id))["t2"]
    assert failed.is_error
    assert "sub-agent 'scribe' failed" in failed.content
    assert str(by_call["t2"].id) in failed.content
    assert "max_turns (1) reached" in failed.content


# --- cancellation ------------------------------------------------------------------------


async def test_cancelling_the_parent_cancels_its_child_and_a_resume_continues_both(
    store: RunStore, tenant: uuid.UUID, tmp_path: Path
) -> None:
    agent_file = team(
        tmp_path,
        lead=[{"tool_calls": [task("t1", "Look slowly.")]}, {"text": "Done."}],
        researcher=[{"tool_calls": [call("r1", "look", "slow")]}, {"text": REPORT}],
    )
    harness = Harness(store, tenant_id=tenant)
    run = await harness.start(AgentDefinition.from_file(agent_file), "Go.")
    async with anyio.create_task_group() as tg:
        tg.start_soon(harness.execute, run.id)
        # The child's tool is running (a file, not an event: the tool is the child's own).
        for _ in range(1000):
            if executions(tmp_path):
                break
            await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    (child,) = await store.child_runs(tenant, run.id)
    assert child.status is RunStatus.CANCELLED
    assert (await store.get_run(tenant, run.id)).status is RunStatus.CANCELLED

    (tmp_path / "go").touch()
    finished = await Harness(store, tenant_id=tenant).execute(run.id)
    assert finished.status is RunStatus.COMPLETED, finished.error
    (again,) = await store.child_runs(tenant, run.id)
    assert again.id == child.id and again.status is RunStatus.COMPLETED
    lead = await store.get_run(tenant, run.id)
    assert results(await store.load_messages(tenant, lead.session_id))["t1"].content == REPORT


# --- kill -9 around a nested approval --------------------------------------------------------


async def test_kill_9_after_the_approved_child_write_ran_never_writes_twice(
    tmp_path: Path, database_url: str
) -> None:
    team(
        tmp_path,
        lead=[
            {"tool_calls": [call("p1", "look", "before"), task("t1", "Write the notes.")]},
            {"text": "All done."},
        ],
        researcher=[{"tool_calls": [call("r1", "write", "notes")]}, {"text": REPORT}],
        researcher_extra=GATED,
    )
    tenant = uuid.uuid4()  # the PostgreSQL database is shared by the session's tests
    cli = HangoCli(tmp_path, database_url=database_url, env={"HANGO_TENANT": str(tenant)})
    first = cli.run("run", "--agent", "agent.toml", "Go.")
    assert first.returncode == 3, first.stderr
    (child, lead) = await cli.runs(tenant)
    # The approved write runs, and its process dies before the child saves the result.
    killed = cli.run("resume", str(lead.id), "--approve", "r1", env={"KILL_AT": "write notes"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert executions(tmp_path) == {"look before": 1, "write notes": 1}

    again = cli.run("resume", "--force", str(lead.id))
    async with cli.store() as store:
        lead = await store.get_run(tenant, lead.id)
        child = await store.get_run(tenant, child.id)
        # Asked again about a write whose outcome is unknown: a person decides again, and
        # the lead waits with its task call pending, its sibling's result kept.
        assert again.returncode == 3, again.stderr
        assert (lead.status, child.status) == (RunStatus.SUSPENDED, RunStatus.SUSPENDED)
        assert [c.id for c in await store.child_runs(tenant, lead.id)] == [child.id]
    assert executions(tmp_path) == {"look before": 1, "write notes": 1}
    shown = json.loads(cli.run("runs", "show", "--json", str(lead.id)).stdout)
    (question,) = [q for q in shown["pending"] if q["decision"] is None]
    (asked,) = question["request"]["pending"]
    assert asked["tool_call_id"] == "r1"
    # The person says it already happened: the child goes on without writing again.
    done = cli.run("resume", str(lead.id), "--respond", f"{asked['id']}=It was written.")
    assert done.returncode == 0, done.stderr
    assert executions(tmp_path) == {"look before": 1, "write notes": 1}
    async with cli.store() as store:
        lead = await store.get_run(tenant, lead.id)
        child = await store.get_run(tenant, child.id)
        assert (lead.status, child.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
        assert_valid_history(await store.load_messages(tenant, child.session_id))
        assert_valid_history(await store.load_messages(tenant, lead.session_id))
