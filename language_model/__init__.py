"""The language-model experiment: a GRU/LSTM language model with the decoders' residual connections (language_model/lm.py, language_model/lm_experiment.py)."""

import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
