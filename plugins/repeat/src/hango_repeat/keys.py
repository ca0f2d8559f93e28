"""The identity of a tool call: FNV-1a 64 of the tool name followed by the canonical JSON of
its arguments (keys sorted, no insignificant whitespace, UTF-8), so ``{"a":1,"b":2}`` and
``{"b":2,"a":1}`` are the same call.

FNV-1a is specified in RFC 9923 (offset basis 0xcbf29ce484222325, prime 0x100000001b3). It is
a fast, non-cryptographic hash: a model that wanted to dodge the detector could just change an
argument, so collision resistance buys nothing here.
"""

from __future__ import annotations

import json
from typing import Final

from hango import JSON

FNV64_OFFSET_BASIS: Final = 0xCBF29CE484222325
FNV64_PRIME: Final = 0x100000001B3
_MASK64: Final = 0xFFFFFFFFFFFFFFFF


def fnv1a_64(data: bytes) -> int:
    """The 64-bit FNV-1a hash of ``data`` (``fnv1a_64(b"") == FNV64_OFFSET_BASIS``)."""
    h = FNV64_OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & _MASK64
    return h


def canonical_json(value: JSON) -> str:
    """``value`` as JSON with sorted keys and no insignificant whitespace.

    Non-ASCII text is kept as is (not ``\\u`` escaped), so the bytes hashed are the UTF-8 of
    what the model sent. Raises ``TypeError`` for a value JSON cannot hold.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_key(name: str, arguments: JSON) -> str:
    """The call's key: ``fnv1a_64(name + canonical_json(arguments))`` as 16 hex digits."""
    return f"{fnv1a_64((name + canonical_json(arguments)).encode()):016x}"
