"""The demo: a toy corpus with long-distance agreement, two decoders trained on it, and their report (demo/demo.py)."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
