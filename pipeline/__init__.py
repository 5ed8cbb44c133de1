"""From raw corpora to trained models: preprocessing (pipeline/preprocess.py) and the train_*.sh launcher (pipeline/train_pair.py)."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
