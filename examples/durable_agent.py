"""The reference durable agent (the same code path as ``zincir demo``).

The loop itself lives in ``zincir/demo.py`` so that the installed CLI can run it; read it
there. Environment: ZINCIR_DATABASE_PATH, ZINCIR_RESUME=1, ZINCIR_OUTPUT_DIR and the
ZINCIR_PAUSE_{BEFORE_TOOL,AFTER_TOOL,AFTER_CHECKPOINT}_MS crash boundaries.
"""

from zincir.demo import main

if __name__ == "__main__":
    main()
