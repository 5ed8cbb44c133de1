"""The machinery the dl4mt core and the commands need, one module a purpose.

Theano itself: theano_env (set-up; imported before Theano by every entry
point), theano_flags, theano_repairs (the named repairs of theano-pymc),
fast_ops (C ops of the CPU graphs).  Commands: cli (how a command ends),
progress, worker_processes.  Files: text_io, model_io, vocab, nbest,
unk_replace.  Training runs: training_options, training_state, training_log,
stop_requests, run_lock, distributed (MPI workers).  Results: bleu, plots.
The synthetic corpus of the demo and the tests: toy_corpus.

Nothing here is run as a command; the commands are the top level's and the
folders' scripts (docs/code.md).
"""
