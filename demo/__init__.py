"""The demo: a toy corpus with long-distance agreement, two decoders trained on it, and their report (demo/demo.py)."""
