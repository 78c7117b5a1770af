"""The recovery benchmark, shortened for make test."""
