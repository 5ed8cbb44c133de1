"""From raw corpora to trained models: preprocessing (pipeline/preprocess.py) and the train_*.sh launcher (pipeline/train_pair.py)."""
