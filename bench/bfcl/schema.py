"""BFCL function docs -> hango ``ToolSpec`` (a JSON Schema per function).

A BFCL doc is ``{"name", "description", "parameters": {"type": "dict", "properties": ...,
"required": [...]}, "response": ...}``. Its ``type`` names are Python's, not JSON Schema's, so
they are mapped (``TYPES``). Only the keywords below are carried over; any other keyword in a
doc is an error, so a new BFCL release cannot slip a construct past the mapping unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hango import ToolSpec

#: BFCL type name -> JSON Schema type. "dict" is an object; "float" a number (JSON has one
#: number type; integers validate as numbers too); "tuple" an array (JSON has no tuple, so the
#: method receives a list); "any" maps to None: the schema gets no "type" keyword, which in
#: JSON Schema means any value.
TYPES: dict[str, str | None] = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "tuple": "array",
    "any": None,
}

#: Corrections of BFCL docs that contradict BFCL's own data: (function, parameter) -> (schema
#: keywords replacing the mapped ones, why). Applied by ``tool_spec`` and printed by every bench
#: run that offers the function; a test checks each one is still needed.
ERRATA: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    ("close_ticket", "ticket_id"): (
        {"type": ["integer", "string"]},
        "documented as integer, but TicketAPI finds tickets by equality and the scenario of "
        "multi_turn_*_173 has a ticket with id 'ticket_001', which its ground truth closes",
    ),
}

_KEYWORDS = frozenset({"type", "description", "properties", "required", "items", "default", "enum"})


def json_schema(doc: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The JSON Schema of one BFCL parameter doc (recursively); ``where`` names it in errors.

    Raises ``ValueError`` for an unknown type name or keyword.
    """
    unknown = set(doc) - _KEYWORDS
    if unknown:
        raise ValueError(f"{where}: keywords {sorted(unknown)} have no JSON Schema mapping")
    schema: dict[str, Any] = {}
    if "type" in doc:
        if doc["type"] not in TYPES:
            raise ValueError(f"{where}: BFCL type {doc['type']!r} has no JSON Schema mapping")
        mapped = TYPES[doc["type"]]
        if mapped is not None:
            schema["type"] = mapped
    for key in ("description", "default", "enum", "required"):
        if key in doc:
            schema[key] = doc[key]
    if "properties" in doc:
        schema["properties"] = {
            name: json_schema(sub, f"{where}.{name}") for name, sub in doc["properties"].items()
        }
    if "items" in doc:
        schema["items"] = json_schema(doc["items"], f"{where}[]")
    return schema


def tool_spec(doc: Mapping[str, Any]) -> ToolSpec:
    """The ``ToolSpec`` of one BFCL function doc; its input schema is always an object."""
    schema = json_schema(doc["parameters"], doc["name"])
    schema["type"] = "object"
    properties = schema.setdefault("properties", {})
    for (function, parameter), (patch, _) in ERRATA.items():
        if function == doc["name"] and parameter in properties:
            properties[parameter] = {**properties[parameter], **patch}
    return ToolSpec(doc["name"], doc["description"], schema)


def parameter_names(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """The function's parameter names in doc order (what positional arguments map onto)."""
    return tuple(doc["parameters"].get("properties", {}))
