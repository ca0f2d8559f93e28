"""Tools: the Tool protocol, results, the ``@tool`` decorator, registry and views."""

from hango.tool.base import Tool, ToolContext, ToolResult, error_result
from hango.tool.function import FunctionTool, tool
from hango.tool.registry import ToolRegistry, ToolView

__all__ = [
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolView",
    "error_result",
    "tool",
]
