"""Theano as this project runs it, the layer below the model and above the
run services of machinery/.

theano_env sets Theano up (imported before Theano by every entry point that
builds graphs); theano_flags, allocator, machine (what the arithmetic of a
run depends on); theano_repairs (the named repairs of theano-pymc) and
module_compiles (its C-module compiles); fast_ops, recurrent_ops and
threaded_ops (C ops of the CPU graphs); function_cache (compiled functions
kept between runs).  Nothing here is run as a command.
"""
import machinery  # noqa: F401 -- first, so a missing package ends in the one setup line
