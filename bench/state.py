"""State size: what saving and restoring a run's state costs as the state grows.

::

    uv run python -m bench.state

A save is ``dump_state`` then the JSON text the SQLite store writes (``json.dumps`` with
``ensure_ascii=False`` and compact separators); a restore is ``json.loads`` then
``load_state``. The states hold 0, 100 or 1000 todos, without private state or with the private
state of three middlewares stored through ``store_private`` (repeat-call counts, a
summarization record, memory notes). A second table times ``store_private`` /
``load_private`` of each of those values.

Every number is the minimum over ``--repeats`` rounds; in each round the cases run in a new
random order. The ratios (``load_state`` against ``json.loads``, ``dump_state`` against
``json.dumps``) are the median over rounds of the ratio within a round, so both sides of a
ratio were measured side by side.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import define, field
from hango.agent.state import (
    State,
    Todo,
    TodoStatus,
    dump_state,
    load_private,
    load_state,
    store_private,
)

from bench.chain import Repeat, best, header, median_ratio

TODO_COUNTS = (0, 100, 1000)
STATUSES: tuple[TodoStatus, ...] = ("completed", "in_progress", "pending")

Op = Callable[[], object]


# -- private state shaped like the middlewares that keep some ----------------------------------


@define
class RepeatCounts:
    """repeat_call: how often each (tool, arguments) hash was called in this run."""

    counts: dict[str, int] = field(factory=dict)


@define
class Summary:
    """summarization: the running summary and how far into history it reaches."""

    text: str
    summarized_through: int
    tokens_saved: int


@define
class Note:
    key: str
    text: str


@define
class Memory:
    """memory: notes the agent chose to keep."""

    notes: list[Note] = field(factory=list)


PRIVATE: dict[str, tuple[type[Any], object]] = {
    "repeat_call": (
        RepeatCounts,
        RepeatCounts({hashlib.sha256(b"%d" % i).hexdigest()[:16]: i % 3 + 1 for i in range(50)}),
    ),
    "summarization": (
        Summary,
        Summary("The user asked for a report; the agent read the sources. " * 35, 120, 48_000),
    ),
    "memory": (
        Memory,
        Memory([Note(f"fact-{i}", f"the user prefers option {i} for step {i}") for i in range(20)]),
    ),
}


def make_state(todos: int, private: bool) -> State:
    state = State(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4())
    state.todos = [
        Todo(f"step {i}: write and check section {i} of the report", STATUSES[i % 3])
        for i in range(todos)
    ]
    if private:
        for name, (_, value) in PRIVATE.items():
            store_private(state, name, value)
    return state


def encode(doc: object) -> str:
    """The text SqliteRunStore writes to ``runs.state_json``."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


# -- measurement -----------------------------------------------------------------------------


def _sample(op: Op, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        op()
    return (time.perf_counter_ns() - start) / calls


def measure(
    ops: Mapping[tuple[Any, ...], Op], *, sample_ms: float, repeats: int, seed: int
) -> list[Repeat]:
    """``repeats`` rounds of one ~``sample_ms`` sample per op, in a new random order each."""
    rng = random.Random(seed)
    keys = list(ops)
    calls: dict[tuple[Any, ...], int] = {}
    for key in keys:
        ops[key]()
        calls[key] = max(1, round(sample_ms * 1e6 / _sample(ops[key], 3)))
    rounds: list[Repeat] = []
    for _ in range(repeats):
        rng.shuffle(keys)
        sample: dict[Any, float] = {}
        for key in keys:
            gc.collect()
            sample[key] = _sample(ops[key], calls[key])
        rounds.append(sample)
    return rounds


def size_ops() -> tuple[dict[tuple[Any, ...], Op], dict[tuple[int, bool], int]]:
    """Every op per (todos, private) case, and the JSON size of each case in bytes."""
    ops: dict[tuple[Any, ...], Op] = {}
    sizes: dict[tuple[int, bool], int] = {}
    for todos in TODO_COUNTS:
        for private in (False, True):
            state = make_state(todos, private)
            doc = dump_state(state)
            text = encode(doc)
            if load_state(json.loads(text)) != state:
                raise RuntimeError("state did not round-trip")
            sizes[todos, private] = len(text.encode())
            case = (todos, private)
            ops[(*case, "dump")] = lambda s=state: dump_state(s)
            ops[(*case, "encode")] = lambda d=doc: encode(d)
            ops[(*case, "save")] = lambda s=state: encode(dump_state(s))
            ops[(*case, "decode")] = lambda t=text: json.loads(t)
            ops[(*case, "load")] = lambda d=doc: load_state(d)
            ops[(*case, "restore")] = lambda t=text: load_state(json.loads(t))
    return ops, sizes


def size_table(rounds: Sequence[Repeat], sizes: Mapping[tuple[int, bool], int]) -> list[str]:
    lines = [
        "| todos | private | JSON bytes | dump_state µs | json.dumps µs | save µs "
        "| json.loads µs | load_state µs | restore µs | dump_state / json.dumps "
        "| load_state / json.loads |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for todos in TODO_COUNTS:
        for private in (False, True):
            case = (todos, private)
            us = [
                best(rounds, (*case, op)) / 1000
                for op in ("dump", "encode", "save", "decode", "load", "restore")
            ]

            def ratio(a: str, b: str, case: tuple[int, bool] = case) -> float:
                return median_ratio(rounds, lambda r: r[(*case, a)] / r[(*case, b)])

            lines.append(
                f"| {todos} | {'3 middlewares' if private else 'none'} | {sizes[case]} | "
                + " | ".join(f"{v:.1f}" for v in us)
                + f" | {ratio('dump', 'encode'):.2f}x | {ratio('load', 'decode'):.2f}x |"
            )
    return lines


def per_todo(rounds: Sequence[Repeat]) -> str:
    """ns each todo adds to a save and to a restore (1000 todos against none, no private)."""
    top = TODO_COUNTS[-1]
    save = (best(rounds, (top, False, "save")) - best(rounds, (0, False, "save"))) / top
    restore = (best(rounds, (top, False, "restore")) - best(rounds, (0, False, "restore"))) / top
    return f"each todo adds {save:.0f} ns to a save and {restore:.0f} ns to a restore"


def private_ops() -> dict[tuple[Any, ...], Op]:
    ops: dict[tuple[Any, ...], Op] = {}
    state = make_state(0, True)
    for name, (cls, value) in PRIVATE.items():
        ops[name, "store"] = lambda n=name, v=value: store_private(state, n, v)
        ops[name, "load"] = lambda n=name, c=cls: load_private(state, n, c)
        raw = state.private[name]
        ops[name, "json"] = lambda r=raw: json.loads(encode(r))
    return ops


def private_table(rounds: Sequence[Repeat]) -> list[str]:
    lines = [
        "| middleware | JSON bytes | store_private µs | load_private µs "
        "| JSON round trip µs | load_private / round trip |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    state = make_state(0, True)
    for name in PRIVATE:
        store, load, trip = (best(rounds, (name, op)) / 1000 for op in ("store", "load", "json"))
        ratio = median_ratio(rounds, lambda r, n=name: r[n, "load"] / r[n, "json"])
        size = len(encode(state.private[name]).encode())
        lines.append(f"| {name} | {size} | {store:.1f} | {load:.1f} | {trip:.1f} | {ratio:.2f}x |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__)
    parser.add_argument("--repeats", type=int, default=30, help="rounds (min / median taken)")
    parser.add_argument("--sample-ms", type=float, default=5, help="ms per sample")
    parser.add_argument("--quick", action="store_true", help="a smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.sample_ms = 2, 1
    print(f"# State size ({header()})")
    ops, sizes = size_ops()
    rounds = measure(ops, sample_ms=args.sample_ms, repeats=args.repeats, seed=1)
    print(
        f"\n## save and restore, µs per op; {args.repeats} rounds of {args.sample_ms:g} ms "
        "samples (µs: min; ratios: median of in-round ratios)\n"
    )
    print("\n".join(size_table(rounds, sizes)))
    print(f"\n{per_todo(rounds)}")
    rounds = measure(private_ops(), sample_ms=args.sample_ms, repeats=args.repeats, seed=2)
    print("\n## private state accessors, µs per op\n")
    print("\n".join(private_table(rounds)))


if __name__ == "__main__":
    main()
