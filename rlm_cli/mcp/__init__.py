"""``rlm mcp``: rlm as a tool for coding agents and editors, over the Model Context Protocol."""
