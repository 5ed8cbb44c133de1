"""Speed: benchmarks of training and translation (speed/benchmark.py) and Theano profiles."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
