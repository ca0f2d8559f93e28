"""State size: what saving and restoring a run's state costs as the state grows.

::

    uv run python -m bench.state

A save is ``dump_state`` then the JSON text the SQLite store writes (``json.dumps`` with
``ensure_ascii=False`` and compact separators); a restore is ``json.loads`` then
``load_state``. The states hold 0, 100 or 1000 todos, without private state or with the private
state of three middlewares stored through ``store_private`` (repeat-call counts, a
summarization record, memory notes). A second table times ``store_private`` /
``load_private`` of each of those values.

Every number is the minimum over ``--repeats`` rounds; in each round every op runs one short
sample, in a new random order, so both sides of a ratio (``dump_state`` against ``json.dumps``,
``load_state`` against ``json.loads``) were measured side by side in one process.
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import define, field

from bench.chain import header
from hango.agent.state import (
    State,
    Todo,
    TodoStatus,
    dump_state,
    load_private,
    load_state,
    store_private,
)

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


def save(state: State) -> str:
    return encode(dump_state(state))


def restore(text: str) -> State:
    return load_state(json.loads(text))


def round_trip(value: object) -> object:
    return json.loads(encode(value))


# -- measurement -----------------------------------------------------------------------------


def _sample(op: Op, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        op()
    return (time.perf_counter_ns() - start) / calls


def _calibrate(op: Op, sample_ms: float) -> int:
    """Calls per sample of about ``sample_ms`` (see ``bench.chain._calibrate``)."""
    calls = 1
    while _sample(op, calls) * calls < sample_ms * 1e6 / 5:
        calls *= 2
    per_call = min(_sample(op, calls) for _ in range(3))
    return max(1, round(sample_ms * 1e6 / per_call))


def measure(
    ops: Mapping[tuple[Any, ...], Op], *, sample_ms: float, repeats: int, seed: int
) -> dict[tuple[Any, ...], float]:
    """Min ns per op over ``repeats`` rounds of one ~``sample_ms`` sample of every op, the ops
    in a new random order each round (see ``bench.chain.measure``)."""
    rng = random.Random(seed)
    keys = list(ops)
    calls: dict[tuple[Any, ...], int] = {}
    for key in keys:
        ops[key]()
        calls[key] = _calibrate(ops[key], sample_ms)
    best = dict.fromkeys(keys, float("inf"))
    for _ in range(repeats):
        rng.shuffle(keys)
        for key in keys:
            gc.collect()
            best[key] = min(best[key], _sample(ops[key], calls[key]))
    return best


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
            ops[(*case, "dump")] = functools.partial(dump_state, state)
            ops[(*case, "encode")] = functools.partial(encode, doc)
            ops[(*case, "save")] = functools.partial(save, state)
            ops[(*case, "decode")] = functools.partial(json.loads, text)
            ops[(*case, "load")] = functools.partial(load_state, doc)
            ops[(*case, "restore")] = functools.partial(restore, text)
    return ops, sizes


def size_table(
    best: Mapping[tuple[Any, ...], float], sizes: Mapping[tuple[int, bool], int]
) -> list[str]:
    lines = [
        "| todos | private | JSON bytes | dump_state µs | json.dumps µs | save µs "
        "| json.loads µs | load_state µs | restore µs | dump_state / json.dumps "
        "| load_state / json.loads |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for todos in TODO_COUNTS:
        for private in (False, True):
            case = (todos, private)
            dump, enc, save, dec, load, restore = (
                best[(*case, op)] / 1000
                for op in ("dump", "encode", "save", "decode", "load", "restore")
            )
            lines.append(
                f"| {todos} | {'3 middlewares' if private else 'none'} | {sizes[case]} "
                f"| {dump:.1f} | {enc:.1f} | {save:.1f} | {dec:.1f} | {load:.1f} | {restore:.1f} "
                f"| {dump / enc:.2f}x | {load / dec:.2f}x |"
            )
    return lines


def per_todo(best: Mapping[tuple[Any, ...], float]) -> str:
    """ns each todo adds to a save and to a restore (1000 todos against none, no private)."""
    top = TODO_COUNTS[-1]
    save = (best[top, False, "save"] - best[0, False, "save"]) / top
    restore = (best[top, False, "restore"] - best[0, False, "restore"]) / top
    return f"each todo adds {save:.0f} ns to a save and {restore:.0f} ns to a restore"


def private_ops() -> dict[tuple[Any, ...], Op]:
    ops: dict[tuple[Any, ...], Op] = {}
    state = make_state(0, True)
    for name, (cls, value) in PRIVATE.items():
        ops[name, "store"] = functools.partial(store_private, state, name, value)
        ops[name, "load"] = functools.partial(load_private, state, name, cls)
        ops[name, "json"] = functools.partial(round_trip, state.private[name])
    return ops


def private_table(best: Mapping[tuple[Any, ...], float]) -> list[str]:
    lines = [
        "| middleware | JSON bytes | store_private µs | load_private µs "
        "| JSON round trip µs | load_private / round trip |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    state = make_state(0, True)
    for name in PRIVATE:
        store, load, trip = (best[name, op] / 1000 for op in ("store", "load", "json"))
        size = len(encode(state.private[name]).encode())
        lines.append(
            f"| {name} | {size} | {store:.1f} | {load:.1f} | {trip:.1f} | {load / trip:.2f}x |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__)
    parser.add_argument("--repeats", type=int, default=30, help="rounds (min taken)")
    parser.add_argument("--sample-ms", type=float, default=5, help="ms per sample")
    parser.add_argument("--quick", action="store_true", help="a smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.sample_ms = 2, 1
    print(f"# State size ({header()})")
    ops, sizes = size_ops()
    best = measure(ops, sample_ms=args.sample_ms, repeats=args.repeats, seed=1)
    print(
        f"\n## save and restore, µs per op; {args.repeats} rounds of {args.sample_ms:g} ms "
        "samples (min per op)\n"
    )
    print("\n".join(size_table(best, sizes)))
    print(f"\n{per_todo(best)}")
    best = measure(private_ops(), sample_ms=args.sample_ms, repeats=args.repeats, seed=2)
    print("\n## private state accessors, µs per op (min per op)\n")
    print("\n".join(private_table(best)))


if __name__ == "__main__":
    main()
