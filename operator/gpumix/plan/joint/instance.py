"""Input of the joint planner: every service's demand and replica options, every pool's GPUs.

One :class:`JointInstance` is Coral's online allocation problem (§4.3) with Mélange's demand
model inside each service: a service is a request-rate histogram under an SLO (Mélange §5.1),
its *replica options* are Coral's serving templates / Jiang et al.'s deployment configurations
(§4.3, App. D): ``k`` GPUs of one type in one node running one tensor-parallel replica, with its
own profiled MaxTput per bucket. Pools cap GPUs per type (Coral's ``A_{r,g}``, Jiang's ``a_n``);
budgets cap $/h per service and for the cluster (Jiang's ``B``).
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpumix.plan.instance import Bucket, Matrix, _check_rectangular


class Priority(StrEnum):
    """Who is served first when demand cannot be met: interactive traffic, then batch."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


class Objective(StrEnum):
    MIN_COST = "min-cost"
    """Serve every service's demand (or as much as possible) at the lowest $/h (default)."""
    MAX_THROUGHPUT = "max-throughput"
    """Jiang et al. §4.3: the largest common multiple of every demand that the pools and the
    budget can serve (the inverse of the makespan ``T``)."""


class ReplicaOption(BaseModel):
    """One replica configuration a service may run: ``gpus_per_replica`` GPUs of one pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    """Unique within the service; the operator uses ``<pool>`` or ``<pool>-tp<k>``."""
    pool: str = Field(min_length=1)
    gpus_per_replica: int = Field(default=1, ge=1)
    cost_per_hour: float = Field(gt=0, allow_inf_nan=False)
    """$/h of one replica (all of its GPUs)."""
    price_per_hour: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """A price on the pool GPUs one replica takes (:mod:`gpumix.plan.joint.pricing`): added to
    the objective only; not paid, not in budgets, not charged as churn."""
    max_tput: Matrix
    """MaxTput of one replica in req/s per bucket at the service's SLO; 0 = cannot serve."""
    alone_miss: Matrix | None = None
    """Share of each bucket's requests that miss the SLO on this option even alone on an idle
    replica (:attr:`gpumix.plan.GPUOption.alone_miss`); ``None``: not known (counted as none)."""
    running: int = Field(default=0, ge=0)
    """Replicas of this option running now: the churn penalty charges only replicas above it."""
    fixed: int | None = Field(default=None, ge=0)
    """Pin the replica count (e.g. an autoscaler owns the Deployment); ``None`` = free."""

    @field_validator("max_tput", "alone_miss")
    @classmethod
    def _rectangular(cls, value: Matrix | None, info: ValidationInfo) -> Matrix | None:
        return None if value is None else _check_rectangular(value, str(info.field_name))


class Group(NamedTuple):
    """Buckets sharing one traffic split, and the options that may take it
    (:meth:`ServiceDemand.groups`)."""

    buckets: tuple[Bucket, ...]
    options: tuple[int, ...]


class ServiceDemand(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    rates: Matrix
    """req/s per ``[input bucket][output bucket]``, over-provisioning included."""
    options: list[ReplicaOption]
    slice_factor: int = Field(default=8, ge=1)
    priority: Priority = Priority.INTERACTIVE
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """Within a priority class, unserved req/s count ``weight`` times (higher = served first)."""
    budget_per_hour: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    churn_penalty: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Coral §4.3's λ: a newly added replica costs ``λ × its $/h`` once in the objective."""
    min_replicas: int = Field(default=0, ge=0)
    """Fewest replicas across options: a floor the plan holds when pools and budgets allow
    (after serving traffic), else it plans fewer and says why."""
    max_replicas: int | None = Field(default=None, ge=0)
    input_edges: list[int] | None = None
    output_edges: list[int] | None = None
    slo_label: str = ""
    alone_miss_budget: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    """Most share of the service's requests a plan may place where they miss the SLO even alone
    (:attr:`ReplicaOption.alone_miss`), as :attr:`gpumix.plan.AllocationInstance.alone_miss_budget`
    bounds a single service's plan; ``None``: no such bound."""
    routable: bool = False
    """Split each input row as one (:meth:`groups`): the split a router that sees the prompt
    but not the answer's length can execute (:mod:`gpumix.plan.routable`)."""

    @field_validator("rates")
    @classmethod
    def _rect(cls, value: Matrix) -> Matrix:
        return _check_rectangular(value, "rates")

    @model_validator(mode="after")
    def _check(self) -> ServiceDemand:
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"service {self.name}: option names must be unique: {names}")
        shape = self.shape
        for o in self.options:
            for matrix in (o.max_tput, o.alone_miss):
                got = shape if matrix is None else (len(matrix), len(matrix[0]))
                if got != shape:
                    raise ValueError(
                        f"service {self.name}: option {o.name} is {got}, rates {shape}"
                    )
        for edges, size in ((self.input_edges, shape[0]), (self.output_edges, shape[1])):
            if edges is not None and (
                len(edges) != size + 1 or any(b <= a for a, b in itertools.pairwise(edges))
            ):
                raise ValueError(f"service {self.name}: edges {edges} do not fit {size} buckets")
        return self

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rates), len(self.rates[0])

    @property
    def total_rate(self) -> float:
        return sum(map(sum, self.rates))

    def buckets_with_traffic(self) -> list[Bucket]:
        return [(i, j) for i, row in enumerate(self.rates) for j, r in enumerate(row) if r > 0]

    def slice_load(self, option: int, bucket: Bucket) -> float | None:
        """Mélange §5.4.2: one slice's share of one replica, ``None`` if it cannot serve it."""
        i, j = bucket
        tput = self.options[option].max_tput[i][j]
        if tput <= 0:
            return None
        return self.rates[i][j] / (self.slice_factor * tput)

    def groups(self) -> list[Group]:
        """The buckets with traffic that share one traffic split, each with the options that
        serve every one of them within the SLO: one bucket each, or when :attr:`routable`, one
        input row each, as :func:`gpumix.plan.routable.rows` (a row no option serves whole is
        split per bucket, as the router splits it: by its guess of the answer's length)."""
        singles = [
            Group(buckets=(b,), options=tuple(self.servable(b)))
            for b in self.buckets_with_traffic()
        ]
        if not self.routable:
            return singles
        out: list[Group] = []
        for _, row in itertools.groupby(singles, key=lambda g: g.buckets[0][0]):
            parts = list(row)
            whole = set.intersection(*(set(g.options) for g in parts))
            if whole and len(parts) > 1:
                buckets = tuple(b for g in parts for b in g.buckets)
                out.append(Group(buckets=buckets, options=tuple(sorted(whole))))
            else:
                out.extend(parts)
        return out

    def alone_miss_rate(self, option: int, bucket: Bucket) -> float:
        """req/s of ``bucket`` that miss the SLO even alone if all of it ran on ``option``."""
        miss = self.options[option].alone_miss
        i, j = bucket
        return 0.0 if miss is None else self.rates[i][j] * miss[i][j]

    def least_alone_miss(self) -> float:
        """Share of the requests that miss even alone where the fewest do (each group on its
        least missing option; pools aside): a budget below it leaves no plan that serves all."""
        least = sum(
            min((sum(self.alone_miss_rate(o, b) for b in buckets) for o in options), default=0.0)
            for buckets, options in self.groups()
        )
        return least / self.total_rate if self.total_rate > 0 else 0.0

    def servable(self, bucket: Bucket) -> list[int]:
        """Options whose MaxTput for ``bucket`` is above 0 (the SLO can be met there; where
        :meth:`slice_load` is not ``None``)."""
        i, j = bucket
        return [o for o, option in enumerate(self.options) if option.max_tput[i][j] > 0]

    def bucket_label(self, bucket: Bucket) -> str:
        i, j = bucket
        if self.input_edges is None or self.output_edges is None:
            return f"({i}, {j})"
        ie, oe = self.input_edges, self.output_edges
        return f"input {ie[i]}–{ie[i + 1]} / output {oe[j]}–{oe[j + 1]} tokens"

    def unservable(self) -> list[Bucket]:
        """Buckets with traffic that no option can serve within the SLO (:meth:`servable`,
        without listing every option: each joint solve asks it of every service)."""
        return [
            (i, j)
            for i, j in self.buckets_with_traffic()
            if all(o.max_tput[i][j] <= 0 for o in self.options)
        ]


class PoolLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    gpus: int | None = Field(default=None, ge=0)
    """GPUs the planner may place here (GPUPool status: plannable − foreign); ``None`` = any."""


class JointInstance(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    services: list[ServiceDemand]
    pools: list[PoolLimit]
    budget_per_hour: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Cluster-wide cap on $/h over every service (``gpumix run --budget``)."""
    allow_partial: bool = True
    """Serve as much as possible when not everything fits (else: infeasible)."""

    @model_validator(mode="after")
    def _check(self) -> JointInstance:
        names = [s.name for s in self.services]
        if len(set(names)) != len(names):
            raise ValueError(f"service names must be unique: {names}")
        pools = {p.name for p in self.pools}
        if len(pools) != len(self.pools):
            raise ValueError("pool names must be unique")
        for s in self.services:
            for o in s.options:
                if o.pool not in pools:
                    raise ValueError(f"service {s.name}: option {o.name} names unknown pool")
        return self

    def pool(self, name: str) -> PoolLimit:
        return next(p for p in self.pools if p.name == name)
