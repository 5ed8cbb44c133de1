"""The demo's stopping rule: has a training run converged, judged on its
validation cost?

The costs are per target token (nmt.py's validation cost, the mean over
sentences of the summed -log p of each reference word and <eos>, divided by
the mean number of target tokens), one per validation.  A run has converged
at the first validation where either

* **target**: the cost is at most ``target`` nats per token, i.e. the model
  gives the reference words a geometric-mean probability of at least
  ``exp(-target)``; or
* **plateau**: the best cost has improved by less than ``min_gain``
  (relative) over the last ``window`` validations, i.e. it has stopped
  learning (a model that cannot reach the target is also done; its scores
  then show how good it got).

Anything else is still learning; the caller stops it when its budget is
spent ("out of budget").
"""
import math


class ConvergenceRule(object):
    """Feed validation costs with :meth:`add`; it returns None while the run
    is still learning, then a sentence saying why it has converged."""

    def __init__(self, target=0.02, window=10, min_gain=0.02):
        if not target > 0 or window < 1 or not 0 <= min_gain < 1:
            raise ValueError('need target > 0, window >= 1, 0 <= min_gain < 1')
        self.target, self.window, self.min_gain = target, window, min_gain
        self.costs = []

    def add(self, cost):
        """Record one validation cost (nats per target token)."""
        if math.isnan(cost):
            raise ValueError('NaN validation cost')
        self.costs.append(float(cost))
        if cost <= self.target:
            return ('validation cost %.4f nats/token <= %g (reference words at '
                    'mean probability >= %.3f)' % (cost, self.target,
                                                     math.exp(-self.target)))
        if len(self.costs) > self.window:
            before = min(self.costs[:-self.window])
            now = min(self.costs)
            gain = (before - now) / before if before > 0 else 0.0
            if gain < self.min_gain:
                return ('plateau: best validation cost %.4f nats/token, %.1f%% '
                        'better than %d validations before (< %g%%)'
                        % (now, 100 * gain, self.window, 100 * self.min_gain))
        return None

    def best(self):
        return min(self.costs) if self.costs else None
