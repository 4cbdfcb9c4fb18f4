"""MCP: tools from Model Context Protocol servers, beside the built-in ones.

:mod:`iflow.mcp.config` is the settings entry (light: settings import it); :mod:`iflow.mcp.hub`
connects the servers through the official ``mcp`` SDK and turns their tools into the agent's.
"""

from iflow.mcp.config import McpServerConfig

__all__ = ["McpServerConfig"]
