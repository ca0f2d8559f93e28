"""The OpenAI provider against a real OpenAI-compatible server on 127.0.0.1: llama-cpp-python
serving SmolLM2-135M-Instruct (see llama_server.py). A model this small exercises the protocol,
not the quality of answers, so the tests check what the server and hango did, never what the
model said. Each generation is bounded by a small ``max_tokens``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import openai
import pytest

from hango import (
    AgentDefinition,
    Event,
    Harness,
    ModelResponse,
    RunStatus,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolChoice,
    ToolRegistry,
    tool,
)
from hango.agent.middleware import ModelHandler
from hango.middleware import ModelRequest
from hango.provider import ProviderRetry, Usage
from hango.provider.openai import OpenAIChatModel
from hango.store.sqlite import SqliteRunStore

from .llama_server import LlamaServer, free_port

pytestmark = pytest.mark.anyio

#: The server serves its one model whatever the request names.
MODEL = "openai:smollm2"


@asynccontextmanager
async def model_on(base_url: str) -> AsyncIterator[OpenAIChatModel]:
    """The model ``--model openai:smollm2 --base-url URL`` builds, its connections closed after."""
    async with openai.AsyncOpenAI(api_key="unused", base_url=base_url) as client:
        yield OpenAIChatModel(client, "smollm2", max_tokens_field="max_tokens")


def hango(*args: str, cwd: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HANGO_"))}
    env |= {"HANGO_DATABASE_URL": f"sqlite:///{cwd / 'hango.db'}", "NO_COLOR": "1"}
    env |= {"COLUMNS": "250", **env_vars}  # wide enough that no line is cropped or wrapped
    return subprocess.run(
        [sys.executable, "-m", "hango", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_streamed_text_run_through_the_cli(llama_server: LlamaServer, tmp_path: Path) -> None:
    agent = tmp_path / "agent.toml"
    agent.write_text(f'name = "local"\nmodel = "{MODEL}"\nmax_tokens = 24\n')
    done = hango(
        "run", "--agent", str(agent), "--model", MODEL, "--base-url", llama_server.base_url,
        "Say hello to the team.", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("completed (usage not reported by the server)")

    run_id = done.stdout.splitlines()[0].removeprefix("run ")
    shown = json.loads(hango("runs", "show", run_id, "--json", cwd=tmp_path).stdout)
    reply = shown["messages"][-1]
    assert reply["role"] == "assistant"
    (text,) = [b["text"] for b in reply["content"]]
    assert text.strip() and text in done.stdout  # streamed to the terminal as it was saved

    summary = hango(
        "run", "--agent", str(agent), "--model", MODEL, "--base-url", llama_server.base_url,
        "--json", "Say hello again.", cwd=tmp_path,
    )  # fmt: skip
    assert summary.returncode == 0, summary.stderr
    usage = json.loads(summary.stdout)["usage"]
    assert usage == {"input_tokens": 0, "output_tokens": 0, "unknown_calls": 1}


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


class ForceAddThenAnswer:
    """Per call through the chain: the first call must call ``add``, the call after its result
    must not call any tool (so the run ends after exactly one tool call)."""

    name = "force_add_then_answer"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        answered = any(m.tool_results for m in req.request.messages)
        choice = ToolChoice("none") if answered else ToolChoice.tool("add")
        return await next(attrs.evolve(req, request=attrs.evolve(req.request, tool_choice=choice)))


async def test_a_forced_tool_call_is_executed_and_its_answer_accepted(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    """The follow-up request carries the assistant's tool call (``content: ""``, which this
    server accepts where it answers ``null`` with HTTP 500) and the ``role: tool`` reply."""
    agent = AgentDefinition(
        "calc", MODEL, max_tokens=48, max_turns=3, base_url=llama_server.base_url
    )
    events: list[Event] = []

    async def collect(event: Event) -> None:
        events.append(event)

    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    try:
        async with model_on(llama_server.base_url) as model:
            harness = Harness(
                store,
                model=model,
                tools=ToolRegistry([add]),
                stack=lambda _: [ForceAddThenAnswer()],
            )
            finished = await harness.run(agent, "What is 2 plus 3?", emit=collect)
    finally:
        await store.aclose()

    assert finished.status is RunStatus.COMPLETED, finished.error
    (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    (done,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert started.call.name == "add" and set(started.call.input) == {"a", "b"}
    assert not done.result.is_error
    assert done.result.content == str(started.call.input["a"] + started.call.input["b"])
    assert finished.usage == Usage(unknown_calls=2)  # this server reports no usage
    assert not [e for e in events if isinstance(e, ProviderRetry)]


async def test_a_server_killed_mid_stream_leaves_a_saved_resumable_failed_run(
    llama_python: Path, llama_server: LlamaServer, tmp_path: Path
) -> None:
    # the server is still generating when the first piece arrives (and killed within ms)
    agent = AgentDefinition("story", MODEL, max_tokens=24)
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    with LlamaServer(llama_python, tmp_path / "doomed.log") as doomed:

        async def kill_on_first_text(event: Event) -> None:
            if isinstance(event, TextDelta):
                doomed.kill()

        store = await SqliteRunStore.open(db)
        try:
            async with model_on(doomed.base_url) as model:
                harness = Harness(store, model=model, tools=ToolRegistry(), stack=lambda _: [])
                prompt = "Tell a long story about a cat."
                failed = await harness.run(agent, prompt, emit=kill_on_first_text)
        finally:
            await store.aclose()
    url = f"{doomed.base_url}/chat/completions"
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.startswith(
        f"openai: the connection to {url}"
    ), failed.error

    store = await SqliteRunStore.open(db)  # what was saved, read back from the file
    try:
        saved = await store.get_run(harness.tenant_id, failed.run_id)
        assert (saved.status, saved.error) == (RunStatus.FAILED, failed.error)
        async with model_on(llama_server.base_url) as model:
            harness = Harness(store, model=model, tools=ToolRegistry(), stack=lambda _: [])
            resumed = await harness.execute(failed.run_id)
        history = await store.load_messages(harness.tenant_id, saved.session_id)
    finally:
        await store.aclose()
    assert resumed.status is RunStatus.COMPLETED, resumed.error
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[1].text.strip()


def test_a_closed_port_fails_with_one_line_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    agent = tmp_path / "agent.toml"
    agent.write_text(f'name = "local"\nmodel = "{MODEL}"\nmax_tokens = 8\n')
    done = hango(
        "run", "--agent", str(agent), "--model", MODEL, "--base-url", url, "hi",
        cwd=tmp_path, HANGO_MODEL_RETRIES="1",
    )  # fmt: skip
    error = f"cannot connect to {url}/chat/completions (Connection refused)"
    assert done.returncode == 1, done.stderr
    assert f"openai: no response, retry 1 of 1 in 1 s: {error}" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == f"failed: openai: {error} (0 in / 0 out tokens)"
