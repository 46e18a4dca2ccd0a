"""The sizes both transports of the JSON-RPC server read, apart from the server's code so
that the command line can check its options without loading the server."""

from __future__ import annotations

DEFAULT_MAX_REQUEST_BYTES = 34 * 2**20
"""The largest message either transport reads (an HTTP body, a ``--stdio`` line): a message
at the store's 32 MiB limit plus its envelope."""

MAX_REQUEST_BYTES_LIMIT = 2**30
"""The most ``--max-request-bytes`` may raise that limit to (1 GiB: thirty times a message
at the store's limit, more than any request needs)."""
