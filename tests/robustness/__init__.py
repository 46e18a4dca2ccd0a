"""Tests that try hard to break the store: crashes, concurrency, bad input, security."""
