"""Tests of the adapters in zincir.integrations, each skipped without its extra."""
