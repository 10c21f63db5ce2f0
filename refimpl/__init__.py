"""Reference implementations of LLM training objectives.

``refimpl.exact`` is the arbitrary-precision truth; ``refimpl.arrays`` (NumPy/CuPy) and
``refimpl.torch`` are fast implementations that are checked against it, never trusted.
"""
