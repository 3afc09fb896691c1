"""Helpers shared by several test folders (importable as `support`)."""
