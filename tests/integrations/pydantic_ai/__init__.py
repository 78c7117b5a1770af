"""Tests of zincir.integrations.pydantic_ai (skipped without pydantic-ai-slim)."""
