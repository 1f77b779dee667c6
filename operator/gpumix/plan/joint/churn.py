"""Churn awareness (Coral §4.3): what a newly added replica costs, and the scale-down deadband.

Two mechanisms, both pure:

- the *initialisation penalty* in the objective (:func:`gpumix.plan.joint.model.add_churn`):
  a replica above what runs costs ``λ × its $/h`` once, Coral's ``λ`` being the ratio of a
  replica's startup and model-load time to how long a plan stays in force. A different mix must
  then save more than the penalty to be worth moving to; equal-cost mixes never move;
- a *deadband* on the demand the planner plans for (:func:`planned_rate`): growth is planned for
  at once (capacity is needed now), but a fall within ``tolerance`` of the rate last planned for
  keeps that rate, so demand wiggles do not remove replicas only to add them back a minute
  later (the scale-down counterpart of the penalty, like the HPA's 10% tolerance).
"""

from __future__ import annotations

DEFAULT_CHURN_PENALTY = 0.5
"""λ: 10 minutes of node startup, image pull and model load over a 20-minute planning horizon."""

DEFAULT_TOLERANCE = 0.1
"""Relative fall in demand that is absorbed before replicas are removed."""


def planned_rate(actual: float, previous: float | None, tolerance: float) -> float:
    """The request rate to plan for now, given the rate the plan in force was made for."""
    if previous is None or actual > previous:
        return actual
    if actual >= previous * (1.0 - tolerance):
        return previous
    return actual
