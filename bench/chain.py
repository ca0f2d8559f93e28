"""Chain overhead: hango's middleware chain against a bare closure onion and LangChain v1.

Two parts, each measured side by side in one process and printed as a table::

    uv run python -m bench.chain              # both parts (LangChain needs the bench group)
    uv run python -m bench.chain --part micro
    uv run python -m bench.chain --part e2e --tool-calls 10

micro
    ``Chain.model_call`` / ``Chain.tool_call`` with N pass-through wrappers (N = 0, 5, 20)
    around a trivial async base, against N ``async def layer(req): return await inner(req)``
    closures around the same base. Reports ns per call, ns per layer, the per-layer ratio
    ``(hango(N) - hango(0)) / (bare(N) - bare(0))`` (the aim is <= 1.5) and the total ratio
    ``hango(N) / bare(N)``, which also counts the chain's fixed per-call work (system-prompt
    assembly for model calls, the exception guard for tool calls).

e2e
    One whole run of K tool calls (K + 1 model calls) through ``run_loop`` with an in-memory
    state, a no-op checkpoint and hango's ``ScriptedModel``, three ways: hango's chain; a
    ``BareOnionChain`` driving the same loop through plain closures of the same depth; and
    LangChain v1 ``create_agent`` with langchain-core's ``FakeMessagesListChatModel`` replaying
    the same tool-call script. Each gets N pass-through model wrappers, N tool wrappers, or N
    of both. The cost N wrappers add to one model call is ``(run(N model wrappers) - run(0)) /
    (K + 1)``; to one tool call ``(run(N tool wrappers) - run(0)) / K``. Chains and agents are
    built once per case; ``Chain.build`` and ``create_agent`` are timed on their own.

Every number is the minimum over ``--micro-repeats`` / ``--e2e-repeats`` rounds of short
samples; in each round every case runs once, in a new random order, so drift on a shared
machine hits every case alike. Samples are short (a few ms) because a short sample is the
likeliest to run in one uncontended slice of a busy 2-core machine; ratios are taken between
the minimums. The title line carries the load average: other work on the machine shows there
first.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import gc
import os
import platform
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import metadata
from typing import Any

from hango.agent.chain import Chain
from hango.agent.loop import LoopSettings, run_loop
from hango.agent.middleware import (
    Middleware,
    ModelHandler,
    ModelRequest,
    ToolCallRequest,
    ToolHandler,
)
from hango.agent.state import State
from hango.provider.messages import Message, Request, StopReason, ToolUseBlock, Usage
from hango.provider.model import ModelResponse
from hango.provider.scripted import ScriptedModel
from hango.tool import ToolRegistry, ToolResult, tool

DEPTHS = (0, 5, 20)
PEERS = ("hango", "langchain", "langchain-core", "langgraph", "langsmith")
#: The per-layer aim from the chain issue: a hango layer costs at most 1.5 bare layers.
PER_LAYER_AIM = 1.5

Case = Callable[[], Awaitable[object]]
#: (call, side, N) in the micro part; (side, wrapper kind, N) in the e2e part.
Key = tuple[str, str, int]


# -- pass-through middlewares ----------------------------------------------------------------


class PassModel:
    """A ModelWrapper that only calls ``next``."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        return await next(req)


class PassTool:
    """A ToolWrapper that only calls ``next``."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        return await next(req)


class PassBoth(PassModel, PassTool):
    """Both wrappers, like a real middleware that watches model and tool calls."""


def bare_onion(
    base: Callable[[Any], Awaitable[Any]], depth: int
) -> Callable[[Any], Awaitable[Any]]:
    """``depth`` plain async closures around ``base``: the floor a chain layer is held to."""
    handler = base
    for _ in range(depth):

        def wrap(inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
            async def layer(req: Any) -> Any:
                return await inner(req)

            return layer

        handler = wrap(handler)
    return handler


def new_state() -> State:
    return State(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4())


# -- measurement -----------------------------------------------------------------------------


async def _sample(case: Case, calls: int) -> float:
    """Nanoseconds per call of ``case`` over ``calls`` consecutive awaits."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        await case()
    return (time.perf_counter_ns() - start) / calls


async def _calibrate(case: Case, sample_ms: float) -> int:
    """Calls per sample of about ``sample_ms``: doubled until a trial lasts a fifth of that,
    then scaled by the fastest of three trials, so one preempted trial cannot make the samples
    short (a sample of a few calls right after ``gc.collect`` runs with cold caches)."""
    calls = 1
    while await _sample(case, calls) * calls < sample_ms * 1e6 / 5:
        calls *= 2
    per_call = min([await _sample(case, calls) for _ in range(3)])
    return max(1, round(sample_ms * 1e6 / per_call))


async def measure(
    cases: Mapping[Key, Case], *, sample_ms: float, repeats: int, seed: int
) -> dict[Key, float]:
    """Min ns per call of each case over ``repeats`` samples of about ``sample_ms`` each.

    Every round runs one sample of every case, in a new random order, so drift on a shared
    machine hits every case alike; the minimum of many short samples is the cost with the least
    contention in it (contention only ever adds time), and ratios are taken between minimums.
    """
    rng = random.Random(seed)
    keys = list(cases)
    calls: dict[Key, int] = {}
    for key in keys:  # warm-up (first-call caches: onions, validators, pydantic), calibration
        await _sample(cases[key], 1)
        calls[key] = await _calibrate(cases[key], sample_ms)
    best = dict.fromkeys(keys, float("inf"))
    for _ in range(repeats):
        rng.shuffle(keys)
        for key in keys:
            gc.collect()
            best[key] = min(best[key], await _sample(cases[key], calls[key]))
    return best


# -- micro: the chain alone ------------------------------------------------------------------

_RESPONSE = ModelResponse(Message("assistant", ()), StopReason.END_TURN, Usage())
_RESULT = ToolResult("ok")


async def _base_model(req: ModelRequest) -> ModelResponse:
    return _RESPONSE


async def _base_tool(req: ToolCallRequest) -> ToolResult:
    return _RESULT


def micro_cases() -> dict[Key, Case]:
    state = new_state()
    # With the per-call model set, as the loop sends every request.
    model = ScriptedModel.from_turns([{"text": "hi"}])
    mreq = ModelRequest(Request(model="bench", messages=(Message.user("hi"),)), state, model=model)
    treq = ToolCallRequest(ToolUseBlock("call_0", "echo", {"text": "hi"}), None, state)
    cases: dict[Key, Case] = {}
    for n in DEPTHS:
        mchain = Chain.build([PassModel(f"m{i}") for i in range(n)])
        tchain = Chain.build([PassTool(f"t{i}") for i in range(n)])
        bare_m = bare_onion(_base_model, n)
        bare_t = bare_onion(_base_tool, n)
        # Every case goes through one partial, so that call's cost cancels out of the ratios.
        cases["model", "hango", n] = functools.partial(mchain.model_call, mreq, _base_model)
        cases["model", "bare", n] = functools.partial(bare_m, mreq)
        cases["tool", "hango", n] = functools.partial(tchain.tool_call, treq, _base_tool)
        cases["tool", "bare", n] = functools.partial(bare_t, treq)
    return cases


def micro_table(best: Mapping[Key, float]) -> tuple[list[str], bool]:
    """The micro table's lines and whether every per-layer ratio meets the aim."""
    lines = [
        "| call | N | hango ns/call | bare ns/call | hango ns/layer | bare ns/layer "
        "| per-layer ratio | total ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    met = True
    for op in ("model", "tool"):
        h0, b0 = best[op, "hango", 0], best[op, "bare", 0]
        for n in DEPTHS:
            h, b = best[op, "hango", n], best[op, "bare", n]
            if n:
                hl, bl = (h - h0) / n, (b - b0) / n
                met = met and hl / bl <= PER_LAYER_AIM
                layer = f"{hl:.0f} | {bl:.0f} | {hl / bl:.2f}x"
            else:
                layer = "- | - | -"
            lines.append(f"| {op} | {n} | {h:.0f} | {b:.0f} | {layer} | {h / b:.2f}x |")
    return lines, met


# -- e2e: a whole run, hango against LangChain -----------------------------------------------


@tool
async def echo(text: str) -> str:
    """Return ``text`` unchanged."""
    return text


WRAPPERS: dict[str, type[PassModel] | type[PassTool]] = {
    "model": PassModel,
    "tool": PassTool,
    "both": PassBoth,
}


def _script(k: int) -> list[dict[str, Any]]:
    """K turns of one ``echo`` call each, then a closing text turn."""
    call: dict[str, Any] = {"name": "echo", "input": {"text": "hi"}}
    return [{"tool_calls": [call]} for _ in range(k)] + [{"text": "done"}]


async def _ignore(_: object) -> None:
    pass


class BareOnionChain(Chain):
    """A chain with no middlewares whose onions are ``bare_onion`` closures: ``run_loop``
    driven through the same depth of plain coroutines, the floor for a chain of N wrappers.

    It keeps the exception guard on tool calls, so at N = 0 it is hango's empty chain.
    """

    def __init__(self, model_depth: int, tool_depth: int) -> None:
        super().__init__([])
        self.model_depth, self.tool_depth = model_depth, tool_depth
        # One slot, not a dict: the loop's base handlers are new closures in every run.
        self._model: tuple[ModelHandler, ModelHandler] | None = None
        self._tool: tuple[ToolHandler, ToolHandler] | None = None

    def model_handler(self, base: ModelHandler) -> ModelHandler:
        if self._model is None or self._model[0] is not base:
            self._model = (base, bare_onion(base, self.model_depth))
        return self._model[1]

    def tool_handler(self, base: ToolHandler) -> ToolHandler:
        if self._tool is None or self._tool[0] is not base:
            self._tool = (base, bare_onion(super().tool_handler(base), self.tool_depth))
        return self._tool[1]


def loop_runner(k: int, chain: Chain) -> Callable[[], Awaitable[list[Message]]]:
    """One run of ``_script(k)`` through ``run_loop`` and ``chain``, minus the store.

    The chain is built once and reused, like LangChain's agent. (The Harness builds one per
    run; ``Chain.build`` is timed on its own. A reused Chain keeps one cached onion per run,
    keyed by the loop's per-run base handlers: a few hundred here, harmless.)
    """
    model = ScriptedModel.from_turns(_script(k))
    view = ToolRegistry([echo]).view()
    settings = LoopSettings(model="bench", max_turns=k + 2)

    async def run() -> list[Message]:
        state = new_state()
        state.messages.append(Message.user("go"))
        await run_loop(
            state,
            chain=chain,
            model=model,
            view=view,
            settings=settings,
            emit=_ignore,
            checkpoint=_ignore,
        )
        return state.messages

    return run


def check_hango(k: int, messages: list[Message]) -> None:
    results = [r for m in messages for r in m.tool_results]
    if len(results) != k or any(r.is_error for r in results) or messages[-1].text != "done":
        raise RuntimeError(f"hango run did not make {k} good tool calls: {messages!r}")


def langchain_cases(k: int) -> dict[tuple[str, int], tuple[Case, Case]] | None:
    """LangChain v1 (run, build) cases keyed by (wrapper kind, N), or None without the bench
    group. A run is one ``ainvoke`` of an agent built once; a build is one ``create_agent``."""
    try:
        from langchain.agents import create_agent
        from langchain.agents.middleware import AgentMiddleware
        from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
        from langchain_core.outputs import ChatResult
        from langchain_core.tools import tool as lc_tool
    except ImportError:
        return None

    class ScriptChatModel(FakeMessagesListChatModel):
        """langchain-core's list fake made fit for create_agent: ``bind_tools`` keeps the
        script, and ``_agenerate`` answers in the event loop (the base class sends its sync
        ``_generate`` to a worker thread, a hop hango's ScriptedModel does not make)."""

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self

        async def _agenerate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            return self._generate(messages, stop)

    class LCPass(AgentMiddleware[Any, Any, Any]):
        def __init__(self, name: str) -> None:
            self._name = name

        @property
        def name(self) -> str:  # create_agent rejects repeated names (default: class name)
            return self._name

    class LCPassModel(LCPass):
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    class LCPassTool(LCPass):
        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    class LCPassBoth(LCPassModel, LCPassTool):
        pass

    @lc_tool("echo")
    async def lc_echo(text: str) -> str:
        """Return ``text`` unchanged."""
        return text

    turns: list[BaseMessage] = [
        AIMessage(
            content="",
            tool_calls=[{"name": "echo", "args": {"text": "hi"}, "id": f"call_{i}"}],
        )
        for i in range(k)
    ]
    turns.append(AIMessage(content="done"))
    kinds: dict[str, type[LCPass]] = {"model": LCPassModel, "tool": LCPassTool, "both": LCPassBoth}
    config: Any = {"recursion_limit": 2 * k + 10}

    def cases(kind: str, n: int) -> tuple[Case, Case]:
        middleware = [kinds[kind](f"{kind}{i}") for i in range(n)]

        async def build() -> Any:
            return create_agent(ScriptChatModel(responses=turns), [lc_echo], middleware=middleware)

        agent = create_agent(ScriptChatModel(responses=turns), [lc_echo], middleware=middleware)

        async def run() -> Any:
            return await agent.ainvoke({"messages": [HumanMessage("go")]}, config)

        return run, build

    out = {("both", 0): cases("both", 0)}
    for kind in kinds:
        for n in DEPTHS[1:]:
            out[kind, n] = cases(kind, n)
    return out


def check_langchain(k: int, result: Any) -> None:
    messages = result["messages"]
    tool_messages = [m for m in messages if m.type == "tool"]
    if len(tool_messages) != k or any(m.status == "error" for m in tool_messages):
        raise RuntimeError(f"LangChain run did not make {k} good tool calls: {messages!r}")
    if messages[-1].content != "done":
        raise RuntimeError(f"LangChain run did not end with the closing turn: {messages!r}")


CONFIGS = [("both", 0)] + [(kind, n) for kind in WRAPPERS for n in DEPTHS[1:]]


async def e2e_cases(k: int) -> tuple[dict[Key, Case], bool]:
    """Cases keyed by (side, wrapper kind, N), each run checked once; and whether LangChain is
    there. Sides: "hango", "bare", "langchain" runs; "hango-build", "langchain-build" builds."""
    cases: dict[Key, Case] = {}
    for kind, n in CONFIGS:
        stack = [WRAPPERS[kind](f"{kind}{i}") for i in range(n)]
        model_depth = n if kind in ("model", "both") else 0
        tool_depth = n if kind in ("tool", "both") else 0
        for side, chain in (
            ("hango", Chain.build(stack)),
            ("bare", BareOnionChain(model_depth, tool_depth)),
        ):
            run = loop_runner(k, chain)
            check_hango(k, await run())
            cases[side, kind, n] = run
        if kind == "both":
            cases["hango-build", kind, n] = functools.partial(_build, stack)
    lc = langchain_cases(k)
    if lc is not None:
        for (kind, n), (lc_run, lc_build) in lc.items():
            check_langchain(k, await lc_run())
            cases["langchain", kind, n] = lc_run
            if kind == "both":
                cases["langchain-build", kind, n] = lc_build
    return cases, lc is not None


async def _build(stack: Sequence[Middleware]) -> Chain:
    return Chain.build(stack)


def _calls(k: int, kind: str) -> int:
    """Model calls ("model") or tool calls ("tool") in a run of K tool calls."""
    return k + 1 if kind == "model" else k


def e2e_tables(best: Mapping[Key, float], k: int, with_lc: bool) -> list[tuple[str, list[str]]]:
    """(title, lines) of the run, per-call and build tables."""
    sides = ["hango", "bare"] + (["langchain"] if with_lc else [])
    names = {"hango": "hango", "bare": "bare onion", "langchain": "LangChain"}

    def ratios(values: Mapping[str, float]) -> str:
        out = f" | {values['hango'] / values['bare']:.2f}x"
        if with_lc:
            out += f" | {values['hango'] / values['langchain']:.3f}x"
        return out

    ratio_heads = " | hango/bare" + (" | hango/LangChain" if with_lc else "")
    ratio_rule = "|---:" * (2 if with_lc else 1)

    runs = [
        "| N | " + " | ".join(f"{names[s]} µs/run" for s in sides) + ratio_heads + " |",
        "|---:" + "|---:" * len(sides) + ratio_rule + "|",
    ]
    for n in DEPTHS:
        us = {s: best[s, "both", n] / 1000 for s in sides}
        runs.append(f"| {n} | " + " | ".join(f"{us[s]:.0f}" for s in sides) + ratios(us) + " |")

    def added(side: str, kind: str, n: int) -> float:
        """ns N ``kind`` wrappers add to one model call ("model") or one tool call ("tool")."""
        return (best[side, kind, n] - best[side, "both", 0]) / _calls(k, kind)

    # hango's and the bare onion's N = 0 runs do the same work: their gap is the noise floor.
    noise_run = abs(best["hango", "both", 0] - best["bare", "both", 0])
    per_call = ["| N | call | " + " | ".join(f"{names[s]} +ns" for s in sides) + ratio_heads]
    per_call[0] += " |"
    per_call.append("|---:|---" + "|---:" * len(sides) + ratio_rule + "|")
    for kind in ("model", "tool"):
        floor = 2 * noise_run / _calls(k, kind)
        for n in DEPTHS[1:]:
            ns = {s: added(s, kind, n) for s in sides}
            quiet = {s: s != "langchain" and abs(ns[s]) <= floor for s in sides}
            cells = " | ".join(f"{ns[s]:.0f}" + (" (noise)" if quiet[s] else "") for s in sides)
            row = f"| {n} | {kind} | {cells}"
            h, b = ns["hango"], ns["bare"]
            row += " | -" if quiet["hango"] or quiet["bare"] else f" | {h / b:.2f}x"
            if with_lc:
                # Within the noise, hango's cost is at most the floor: the ratio is a bound.
                bound = "≤ " if quiet["hango"] else ""
                row += f" | {bound}{max(h, floor if quiet['hango'] else h) / ns['langchain']:.3f}x"
            per_call.append(row + " |")
    per_call.append("")
    per_call.append(
        f"(noise): within twice the noise floor, the gap between hango's and the bare onion's "
        f"N = 0 runs, which do the same work: {noise_run / 1000:.0f} µs per run."
    )

    builds = [
        "| N | hango Chain.build µs" + (" | LangChain create_agent µs | ratio" if with_lc else ""),
        "|---:|---:" + ("|---:|---:" if with_lc else "") + "|",
    ]
    builds[0] += " |"
    for n in DEPTHS:
        hb = best["hango-build", "both", n] / 1000
        row = f"| {n} | {hb:.1f}"
        if with_lc:
            lb = best["langchain-build", "both", n] / 1000
            row += f" | {lb:.0f} | {hb / lb:.3f}x"
        builds.append(row + " |")
    return [
        ("µs per run, N pass-through model wrappers and N tool wrappers", runs),
        (
            f"ns N pass-through wrappers add to one call, against the same side's N = 0 "
            f"({k + 1} model calls, {k} tool calls per run)",
            per_call,
        ),
        ("building the chain / agent once (hango's Harness builds one per run)", builds),
    ]


# -- main ------------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def header(dists: Sequence[str] = ("hango",)) -> str:
    """Date, interpreter, machine and the versions of ``dists``, for a table's title."""
    versions = ", ".join(f"{d} {_version(d)}" for d in dists)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{datetime.date.today().isoformat()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load}, {versions}"
    )


async def main(args: argparse.Namespace) -> None:
    print(f"# Chain overhead ({header(PEERS)})")
    if args.part in ("micro", "all"):
        best = await measure(
            micro_cases(), sample_ms=args.micro_ms, repeats=args.micro_repeats, seed=1
        )
        lines, met = micro_table(best)
        print(
            f"\n## micro: ns per call, trivial async base; {args.micro_repeats} rounds of "
            f"{args.micro_ms:g} ms samples (min per case)\n"
        )
        print("\n".join(lines))
        verdict = "met" if met else "MISSED"
        print(f"\nper-layer aim <= {PER_LAYER_AIM}x: {verdict}")
    if args.part in ("e2e", "all"):
        k = args.tool_calls
        cases, with_lc = await e2e_cases(k)
        best = await measure(cases, sample_ms=args.e2e_ms, repeats=args.e2e_repeats, seed=2)
        print(
            f"\n## e2e: one run of {k} tool calls ({k + 1} model calls); {args.e2e_repeats} "
            f"rounds of {args.e2e_ms:g} ms samples (min per case)\n"
        )
        for title, lines in e2e_tables(best, k, with_lc):
            print(f"{title}\n")
            print("\n".join(lines) + "\n")
        if not with_lc:
            print("\nLangChain is not installed: `uv sync --group bench` adds it.")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__)
    parser.add_argument("--part", choices=("micro", "e2e", "all"), default="all")
    parser.add_argument("--micro-repeats", type=int, default=150, help="micro: rounds")
    parser.add_argument("--micro-ms", type=float, default=2, help="micro: ms per sample")
    parser.add_argument("--e2e-repeats", type=int, default=60, help="e2e: rounds")
    parser.add_argument("--e2e-ms", type=float, default=5, help="e2e: ms per sample")
    parser.add_argument("--tool-calls", type=int, default=10, help="e2e: K tool calls per run")
    parser.add_argument("--quick", action="store_true", help="a smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.micro_repeats = args.e2e_repeats = 2
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
