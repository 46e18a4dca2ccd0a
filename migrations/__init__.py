"""Alembic migrations of the contextstore schema (shipped as ``contextstore.migrations``)."""
