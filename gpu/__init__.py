"""The GPU back-end's set-up and check: CUDA libraries, the offline bundle, check.py."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
