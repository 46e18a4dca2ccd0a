"""Tooling around the library, never imported by it: benchmarks against raw SQLite and the
peer stores, the crash (SIGKILL) and concurrency harnesses, and the demo's data.

They live in the package, not only in the tests, so that ``contextstore bench`` and
``contextstore crash-test`` run on any machine where contextstore is installed, and so that
worker functions are importable by processes started with the ``spawn`` method.
"""
