"""Revision scripts, one per schema change, applied in order."""
