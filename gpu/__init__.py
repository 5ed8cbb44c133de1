"""The GPU back-end's set-up and check: CUDA libraries, the offline bundle, check.py."""
