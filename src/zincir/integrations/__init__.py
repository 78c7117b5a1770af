"""Adapters that put other agent frameworks on zincir's store, one extra each.

``zincir.integrations.langgraph``: LangGraph checkpointers (``pip install "zincir[langgraph]"``).
The core never imports an adapter; an adapter whose framework is missing raises an
ImportError naming its extra.
"""
