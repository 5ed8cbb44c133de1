"""Scoring and comparing systems: BLEU, significance tests (evaluation/evaluate.py), result tables, n-best rescoring."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
