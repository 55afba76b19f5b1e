"""Reading an MCP tool result's text in tests, with the content block's type checked."""

from __future__ import annotations

from mcp.types import CallToolResult, TextContent


def first_text(result: CallToolResult) -> str:
    """The text of a tool result's first content block (which must be text)."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text
