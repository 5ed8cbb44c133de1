"""Scoring and comparing systems: BLEU, significance tests (evaluation/evaluate.py), result tables, n-best rescoring."""
