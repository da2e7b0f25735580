"""The web lab: FastAPI app (``app.py``), result cache (``runner.py``), pages and lessons."""
