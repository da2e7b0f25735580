"""normlab: a lab for signal propagation in deep networks.

Initializers and normalization layers written from their formulas (and checked bit for bit or to
float tolerance against PyTorch), reproducible experiments that return data, and the faces built on
them: a command line and a web lab.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``normlab.watch``, imported on first use (it needs torch; ``import normlab`` does not)."""
    if name == "watch":
        from normlab.watching import watch

        return watch
    raise AttributeError(f"module 'normlab' has no attribute {name!r}")
