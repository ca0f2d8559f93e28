"""An MCP ``CallToolResult`` as the ``ToolResult`` the model sees.

- Text blocks are the content, joined by blank lines.
- ``structuredContent`` (already validated by the SDK against the tool's output schema) is
  shown once: the protocol asks servers to send a text form of it too (the JSON, or for a
  wrapped value like ``{"result": "1"}`` the value itself), so a result with text blocks shows
  those and not the structured copy again (agent-framework#7866 showed every result twice);
  a result with no text block shows the structured content as compact JSON.
- hango's tool results are text, so an image, audio clip, resource link or embedded binary is
  a one-line placeholder naming its type (and an embedded text resource is its text).
- ``isError`` results are error results.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from hango import ToolResult


def to_tool_result(result: types.CallToolResult) -> ToolResult:
    """The model's view of ``result`` (see the module docstring)."""
    parts: list[str] = []
    texts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
            parts.append(block.text)
        else:
            parts.append(_placeholder(block))
    structured = result.structured_content
    if structured is not None and not texts:
        parts.insert(0, json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    return ToolResult("\n\n".join(parts), is_error=result.is_error)


def _placeholder(block: Any) -> str:
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        size = len(block.data) * 3 // 4
        return f"[{kind} {block.mime_type}, about {size} bytes: not shown, tool results are text]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}" + (f" ({block.name})" if block.name else "") + "]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        mime = resource.mime_type or "binary"
        return f"[embedded resource {resource.uri}, {mime}: not shown, tool results are text]"
    return f"[{getattr(block, 'type', type(block).__name__)} content: not shown]"
