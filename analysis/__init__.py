"""Looking at what a model learned: attention over the source and over previous words (analysis/analyze.py), and its figures."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
