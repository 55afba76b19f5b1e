"""An MCP server (stdio) that gives an agent corral sandboxes, built on the async SDK."""
