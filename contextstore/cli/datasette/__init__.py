"""Datasette metadata for the audit views, shipped as package data (``metadata.json``)."""
