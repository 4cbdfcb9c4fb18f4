"""The shape of one ``mcpServers`` entry in settings, as Gemini CLI and iFlow CLI write it.

Kept apart from :mod:`iflow.mcp.hub` so that reading settings does not import the MCP SDK.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, AliasGenerator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

DEFAULT_CALL_TIMEOUT_MS = 600_000
"""A tool call's limit when the server sets no ``timeout`` (Gemini CLI's default)."""


def _alias(name: str) -> AliasChoices:
    return AliasChoices(name, to_camel(name))


class McpServerConfig(BaseModel):
    """One entry of ``mcpServers``."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=AliasGenerator(validation_alias=_alias),
    )

    command: str | None = None
    """The program that serves MCP over its stdin and stdout."""
    args: list[str] = Field(default_factory=list)
    """Arguments of ``command``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the stdio server, over the MCP SDK's default set (``$VAR``
    and ``${VAR}`` are expanded from iflow's environment)."""
    cwd: str | None = None
    """The stdio server's working directory; the workspace's root when unset."""
    url: str | None = None
    """An SSE endpoint, or a streamable HTTP one with ``"type": "http"``."""
    http_url: str | None = None
    """A streamable HTTP endpoint (``httpUrl``)."""
    type: Literal["stdio", "sse", "http", "streamable-http"] | None = None
    """``http`` or ``streamable-http``: ``url`` is a streamable HTTP endpoint; otherwise the
    transport follows from which of command, url and httpUrl is given."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent to an SSE or HTTP server (``$VAR`` and ``${VAR}`` expanded)."""
    timeout: int | None = Field(default=None, gt=0)
    """Milliseconds one tool call may take; 600000 when unset."""
    include_tools: list[str] | None = None
    """Only these of the server's tools are offered to the model; None: all of them."""
    exclude_tools: list[str] = Field(default_factory=list)
    """The server's tools never offered to the model (even when in ``include_tools``)."""
    trust: bool = False
    """Run this server's tools without asking."""
    description: str | None = None
    """A note on the server for people reading the settings; iflow does not use it."""
    disabled: bool = False
    """Do not start the server (it is listed as disabled)."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        given = [k for k in ("command", "url", "http_url") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of command (stdio), httpUrl (streamable HTTP) or url (SSE)"
                + (f", not {' and '.join(given)}" if given else "")
            )
        return self

    @property
    def transport(self) -> Literal["stdio", "sse", "http"]:
        if self.command:
            return "stdio"
        if self.http_url or self.type in ("http", "streamable-http"):
            return "http"
        return "sse"

    @property
    def endpoint(self) -> str:
        """What the server is, in a few words (``/mcp`` shows it)."""
        if self.command:
            return " ".join([self.command, *self.args])
        return str(self.http_url or self.url)

    @property
    def call_timeout_sec(self) -> float:
        return (self.timeout or DEFAULT_CALL_TIMEOUT_MS) / 1000
