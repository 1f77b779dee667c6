"""How fast the replicas follow the plan: SageServe §6.5.1's pacing strategies, per service.

The joint plan is the long-term target; pacing decides what to apply now. `Immediate` (LT-I)
applies the target. `Utilisation` (LT-U) moves each option one replica towards it, out only
while the service's KV utilisation (SageServe's effective memory utilisation) is above 70%, in
only below 30%. `UtilisationGap` (LT-UA) is LT-U and, in the last third of the horizon window,
goes past the target when the observed rate is ≥ 5× (≤ 0.5×) the forecast.

One step per observation: a pass only steps when the observation it sees is newer than the one
that allowed the last step (kept in `status.pacing`), so the passes that watch events trigger
between two observations do not step again on the same utilisation. An unknown utilisation
holds; nothing running applies the target at once (a new service must start somewhere).
"""

from pydantic import BaseModel, ConfigDict

from gpumix.api import Pacing, PacingStatus
from gpumix.observe import pacing as lt
from gpumix.reconcile.clock import utc
from gpumix.reconcile.rollout import summary

LABEL = {"Immediate": "LT-I", "Utilisation": "LT-U", "UtilisationGap": "LT-UA"}


class PacingInput(BaseModel):
    """What pacing needs from this pass's observation and forecast (pure data)."""

    model_config = ConfigDict(frozen=True)

    mode: Pacing
    utilisation: float | None = None
    observed_at: float | None = None
    observed_rate: float | None = None
    forecast_rate: float | None = None
    in_final_window: bool = False


def pace(
    inp: PacingInput,
    target: dict[str, int],
    current: dict[str, int],
    previous: PacingStatus | None,
) -> tuple[dict[str, int], PacingStatus | None]:
    """The replicas per option to apply now, and `status.pacing` (None for Immediate)."""
    if inp.mode == "Immediate":
        return dict(target), None
    now = {o: current.get(o, 0) for o in target}
    last_ts = None
    if previous is not None and previous.mode == inp.mode and previous.last_step_observed_at:
        last_ts = previous.last_step_observed_at.timestamp()
    name = LABEL[inp.mode]
    util = "unknown" if inp.utilisation is None else f"{100 * inp.utilisation:.0f}%"

    def status(applied: dict[str, int], step_at: float | None, message: str) -> PacingStatus:
        return PacingStatus(
            mode=inp.mode,
            target_summary=summary(target),
            applied_summary=summary(applied),
            last_step_observed_at=None if step_at is None else utc(step_at),
            message=message,
        )

    if not any(now.values()):
        return dict(target), status(target, inp.observed_at, f"{name}: nothing ran; plan applied")
    if inp.observed_at is None or (last_ts is not None and inp.observed_at <= last_ts):
        return now, status(now, last_ts, f"{name}: one step per observation; KV utilisation {util}")
    paced = {}
    for option, goal in target.items():
        cur = now[option]
        if inp.mode == "Utilisation" or goal == 0:
            paced[option] = lt.lt_utilisation(cur, goal, inp.utilisation, minimum=0)
        else:
            paced[option] = lt.lt_utilisation_gap(
                cur, goal, inp.utilisation, observed_rate=inp.observed_rate,
                forecast_rate=inp.forecast_rate or 0.0, in_final_window=inp.in_final_window,
                minimum=0,
            )  # fmt: skip
    moved = paced != now
    step_at = inp.observed_at if moved else last_ts
    if paced == target:
        why = "at the plan"
    elif moved:
        why = f"stepped towards {summary(target)}"
    else:
        why = (
            f"holding, the plan is {summary(target)} (out above {lt.HIGH:.0%}, in below "
            f"{lt.LOW:.0%})"
        )
    return paced, status(paced, step_at, f"{name}: {why}; KV utilisation {util}")
