"""Harnesses that try to break a store: crash (SIGKILL) campaigns and multi-process workloads.

They live in the package, not only in the tests, so that ``contextstore crash-test`` can
run the long crash campaign on any machine, and so that worker functions are importable by
processes started with the ``spawn`` method.
"""
