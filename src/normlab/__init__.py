"""normlab: a lab for signal propagation in deep networks.

Initializers and normalization layers written from their formulas (and checked bit for bit or to
float tolerance against PyTorch), reproducible experiments that return data, and the faces built on
them: a command line and a web lab.
"""

__version__ = "0.1.0"
