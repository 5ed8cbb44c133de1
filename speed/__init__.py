"""Speed: benchmarks of training and translation (speed/benchmark.py) and Theano profiles."""
