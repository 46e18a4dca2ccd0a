"""The ways in over a process boundary: JSON-RPC 2.0 (stdio and HTTP) and an MCP server.

Each module is a thin adapter over :class:`contextstore.ContextStore`: ``methods`` is the
method table (one JSON-RPC method per public store method, parameters validated by pydantic),
``jsonrpc`` the protocol, ``stdio`` and ``http`` the transports, ``openrpc`` the document
that describes the table, ``mcp_server`` the read-only history tools. The HTTP server needs
``pip install "contextstore[server]"``, the MCP server ``pip install "contextstore[mcp]"``;
nothing here is imported by the library.
"""
