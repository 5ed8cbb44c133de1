"""Looking at what a model learned: attention over the source and over previous words (analysis/analyze.py), and its figures."""
