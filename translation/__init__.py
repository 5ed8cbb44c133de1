"""Translating with trained models: one way to load them and decode
sentences (decoding.py: translate.py, score.py, the BLEU validation, the
benchmarks), and what translate.py writes besides the translations."""
