"""BFCL ground-truth call strings -> (function name, named arguments).

A ground-truth call is a Python expression such as ``"sort('final_report.pdf')"`` or
``"mv(source='a.txt', destination='temp')"``. It is parsed with ``ast`` (never evaluated); every
argument must be a literal (``ast.literal_eval``). Positional arguments are mapped to parameter
names in the order of the function's doc, which is the interface a model sees. (BFCL's own
executor passes them positionally to the Python method instead; the two orders agree for every
positional call in the v4 data, and the bench's cross-check against BFCL's executor would
report a call where they did not.)
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence
from typing import Any

from attrs import frozen


@frozen
class Call:
    """One ground-truth call: the function ``name`` and its ``arguments`` by parameter name."""

    name: str
    arguments: dict[str, Any]


def parse_call(source: str, parameters: Callable[[str], Sequence[str]]) -> Call:
    """Parse one call string; ``parameters(name)`` gives the function's parameter names in doc
    order. Raises ``ValueError`` naming the call for anything but ``name(literal, ...,
    key=literal, ...)`` or for more positional arguments than the doc has parameters."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"ground-truth call {source!r} is not Python: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"ground-truth call {source!r} is not a plain function call")
    name = node.func.id
    names = parameters(name)
    if len(node.args) > len(names):
        raise ValueError(
            f"ground-truth call {source!r}: {len(node.args)} positional arguments, "
            f"the doc of {name} has {len(names)} parameters"
        )
    pairs = [(names[i], arg) for i, arg in enumerate(node.args)]
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"ground-truth call {source!r}: **kwargs is not a literal call")
        pairs.append((keyword.arg, keyword.value))
    arguments: dict[str, Any] = {}
    for key, value in pairs:
        if key in arguments:
            raise ValueError(f"ground-truth call {source!r}: argument {key!r} given twice")
        try:
            arguments[key] = ast.literal_eval(value)
        except ValueError:
            raise ValueError(
                f"ground-truth call {source!r}: argument {key!r} is not a literal"
            ) from None
    return Call(name, arguments)


def as_json(value: object) -> Any:
    """``value`` as it comes back from a JSON round trip (a tuple becomes a list), which is how
    a call's arguments reach the tool after the model streamed them."""
    return json.loads(json.dumps(value, default=str))
