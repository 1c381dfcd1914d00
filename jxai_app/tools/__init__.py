"""Which tools a turn offers: the deployment's registry (built-ins and tool modules), the MCP
servers' tools, the tool policies edited in admin, and the per-turn view built from them
(docs/architecture.md "Floors"; rules: docs/security.md, threat 2, docs/mcp.md, docs/approval.md).

Modules::

    registry.py  get_tool_registry(): the built-ins bound to the store, plus JXAI_TOOL_MODULES
    mcp.py       this worker's MCP sessions: which servers are configured, apply, close
    policy.py    ToolPolicy rows as rules: who may use a tool, its timeout, cap and approval
    offer.py     tool_view(): the tools one turn of one user offers (the three above together)
"""
