"""Jiang et al. §4.3's makespan of a plan: how long its replicas take to process the demand.

With ``f_w`` requests of workload ``w`` (a bucket) and option ``c`` running ``y_c`` replicas of
throughput ``h_{c,w}`` that take the fraction ``x_{c,w}``, option ``c`` finishes after
``T_c = Σ_w x_{c,w} f_w / (y_c h_{c,w})`` and the plan after ``T = max_c T_c`` (their (3)).
The max-throughput objective maximises ``α = 1/T`` (App. C's worked example is a unit test).
"""

from __future__ import annotations

import math

from gpumix.plan.joint.instance import ServiceDemand


def option_time(service: ServiceDemand, counts: dict[str, int], share: dict[str, list[list[float]]],
                option: str) -> float:  # fmt: skip
    """``T_c``: ``service.rates`` are read as request counts ``f_w``, MaxTput as ``h_{c,w}``."""
    k = next(i for i, o in enumerate(service.options) if o.name == option)
    tput = service.options[k].max_tput
    replicas = counts.get(option, 0)
    work = 0.0
    for i, row in enumerate(share.get(option, [])):
        for j, fraction in enumerate(row):
            if fraction > 0:
                if tput[i][j] <= 0:
                    return math.inf
                work += fraction * service.rates[i][j] / tput[i][j]
    if work == 0:
        return 0.0
    return work / replicas if replicas else math.inf


def makespan(
    service: ServiceDemand, counts: dict[str, int], share: dict[str, list[list[float]]]
) -> float:
    return max((option_time(service, counts, share, o.name) for o in service.options), default=0)


def proportional_share(
    service: ServiceDemand, counts: dict[str, int]
) -> dict[str, list[list[float]]]:
    """Jiang §4.2 Cases 1–2: each bucket split in proportion to the replicas' processing rates."""
    rows, cols = service.shape
    share = {o.name: [[0.0] * cols for _ in range(rows)] for o in service.options}
    for i in range(rows):
        for j in range(cols):
            speed = {o.name: counts.get(o.name, 0) * o.max_tput[i][j] for o in service.options}
            total = sum(speed.values())
            for name, value in speed.items():
                share[name][i][j] = value / total if total > 0 else 0.0
    return share
