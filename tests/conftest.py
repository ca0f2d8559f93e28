"""Fixtures of the cross-package tests: hango.testing's (databases, stores, tool boxes, agents
on disk, the CLI runner, ``database_link``) come from its pytest plugin."""
