"""Scenario files: the frozen schema and the loader that validates them."""
