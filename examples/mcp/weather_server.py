"""The example's stdio MCP server: a made-up weather service, written with the ``mcp`` SDK.

hango starts it itself (``command`` in agent.toml); run by hand it waits on stdin.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("weather")

_TODAY = {"oslo": ("light rain", 7.5), "lisbon": ("sunny", 21.0), "nairobi": ("cloudy", 18.0)}


class Forecast(BaseModel):
    city: str
    sky: str
    celsius: float


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str) -> Forecast:
    """Today's weather in a city (Oslo, Lisbon or Nairobi)."""
    sky, celsius = _TODAY.get(city.lower(), ("unknown", float("nan")))
    return Forecast(city=city, sky=sky, celsius=celsius)


if __name__ == "__main__":
    server.run()
