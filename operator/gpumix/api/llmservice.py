"""LLMService: one model served under a latency SLO, on whatever GPU mix is cheapest."""

from datetime import datetime
from typing import ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gpumix.api.base import ApiModel, Condition, Resource
from gpumix.api.podtemplate import ModelCache, PodTemplate
from gpumix.api.workload import Workload

_READY = '.status.conditions[?(@.type=="Ready")]'
DEFAULT_VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"


DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (RFC 1123 subdomain), e.g. a ConfigMap's."""
CONFIG_MAP_KEY = r"^[-._a-zA-Z0-9]+$"
"""A ConfigMap data key (as kubectl create configmap --from-file names it: the file name)."""
MODEL_CONFIG_KEY = "config.json"


class ConfigMapKeySelector(ApiModel):
    """One key of a ConfigMap in the service's namespace (core/v1's ConfigMapKeySelector)."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The ConfigMap's name; it lives in the LLMService's namespace.",
    )
    key: str = Field(
        default=MODEL_CONFIG_KEY,
        min_length=1,
        max_length=253,
        pattern=CONFIG_MAP_KEY,
        description="The key whose value is the config.json (default config.json, the key "
        "`kubectl create configmap --from-file=config.json` gives).",
    )


class ModelConfigSource(ApiModel):
    """Where the model's Hugging Face config.json is."""

    config_map_key_ref: ConfigMapKeySelector = Field(
        description="A ConfigMap key holding the config.json, e.g. `kubectl create configmap "
        "qwen3-config --from-file=config.json`."
    )


class ModelSpec(ApiModel):
    """The model and the engine that serves it."""

    name: str = Field(
        min_length=1, description="Model id passed to vLLM --model; profiles are matched on it."
    )
    served_name: str | None = Field(
        default=None, description="Name clients use in the OpenAI API (default: name)."
    )
    image: str = Field(default=DEFAULT_VLLM_IMAGE, min_length=1, description="vLLM image.")
    args: list[str] = Field(default_factory=list, description="Extra vLLM server arguments.")
    weights_gib: float | None = Field(
        default=None, gt=0, alias="weightsGiB", description="Size of the weights in GiB."
    )
    cache: ModelCache | None = Field(
        default=None, description="Download the weights once into a shared volume (optional)."
    )
    config: ModelConfigSource | None = Field(
        default=None,
        description="The model's Hugging Face config.json, read from a ConfigMap: the shape "
        "(layers, attention and KV heads, context, experts, quantization) gpumix checks that a "
        "replica holds the model with, caps vLLM's --max-model-len by and simulates the plan "
        "with. Needed for a model gpumix has no built-in shape of (README: Planning a service "
        "offline lists them); when set for a built-in model, the ConfigMap's shape wins. Read "
        "again whenever the ConfigMap changes; while it is missing or unreadable, condition "
        "Ready is False (reason InvalidModelConfig, naming this field) and the last plan keeps "
        "serving.",
    )


class Slo(ApiModel):
    """Latency targets. TPOT is Mélange's: request latency ÷ output tokens, averaged (§4.1)."""

    tpot_ms: float = Field(gt=0, description="Time per output token in milliseconds.")
    ttft_ms: float | None = Field(
        default=None, gt=0, description="Time to first token in milliseconds (optional)."
    )
    attainment_target: float = Field(
        default=0.99,
        ge=0.5,
        le=0.9999,
        description="Share of requests that must meet every SLO set here. gpumix simulates each "
        "plan as it is deployed and plans the cheapest mix whose predicted attainment reaches it "
        "(its search aims one standard error of the prediction above it; SLOAtRisk checks the "
        "target itself).",
    )


class Budget(ApiModel):
    max_cost_per_hour: float = Field(
        ge=0, description="Most $/h this service's replicas may cost (Jiang et al. §4.3's B)."
    )


class Churn(ApiModel):
    """Coral §4.3: replans weigh what moving replicas costs."""

    penalty: float = Field(
        default=0.5,
        ge=0,
        le=100,
        description="A newly added replica costs this many hours of its price once in the "
        "planner's objective (startup and model-load time over the planning horizon).",
    )
    tolerance: float = Field(
        default=0.1,
        ge=0,
        le=0.9,
        description="A fall in request rate within this fraction of the rate last planned for "
        "keeps the plan (no replicas removed for demand wiggles).",
    )


class KvMigration(ApiModel):
    """MELL KV-cache scheduling (Liu et al. §IV–VI): move running requests between a pool's pods
    so that the newest pod empties and is removed. Through the router on stock vLLM (a request
    is continued on another pod from its token IDs), or through engines that implement the
    admin contract of gpumix/sim/SERVER.md (a vLLM sidecar)."""

    enabled: bool = Field(default=False, description="Run the KV-migration loop for this service.")
    via: Literal["Router", "Engine"] = Field(
        default="Router",
        description="Router: the router's in-flight ledger and recompute migration (needs "
        "routing.mode Router; only streamed requests that can be continued exactly move). "
        "Engine: each vLLM pod's admin contract (gpumix/sim/SERVER.md), which can also move the "
        "KV cache itself.",
    )
    interval_seconds: int = Field(
        default=10, ge=1, le=3600, description="Seconds between passes (MELL's epoch)."
    )
    max_migrations_per_pass: int = Field(
        default=10,
        ge=1,
        le=10,
        description="Most requests moved per pass (MELL Theorem 3: at most 10 per operation).",
    )


Pacing = Literal["Immediate", "Utilisation", "UtilisationGap"]


class Forecast(ApiModel):
    """SageServe §6.4: a replica takes minutes to start, so plan for the forecast peak of the
    next horizon (plus a buffer), not for the rate now. The history is Prometheus' own (a range
    query of the observed request rate), so it survives operator restarts."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.seasonSeconds == 0 || "
                    "self.seasonSeconds <= 1008 * self.stepSeconds",
                    "message": "seasonSeconds may be at most 1008 steps (e.g. a week at "
                    "10-minute steps, a day at 5): raise stepSeconds",
                    "fieldPath": ".seasonSeconds",
                }
            ]
        }
    )

    enabled: bool = Field(default=False, description="Plan for the forecast peak.")
    horizon_seconds: int = Field(
        default=3600, ge=60, le=86400, description="How far ahead the plan must hold."
    )
    step_seconds: int = Field(
        default=300, ge=15, le=3600, description="Resolution of the rate history and forecast."
    )
    season_seconds: int = Field(
        default=86400,
        ge=0,
        le=604800,
        description="Length of the traffic's season (a day for diurnal traffic); 0: none. "
        "Holt-Winters needs two seasons of history, seasonal-naive one, else a naive mean.",
    )
    buffer: float = Field(
        default=0.1, ge=0, le=10, description="Plan for the forecast peak × (1 + buffer)."
    )

    @model_validator(mode="after")
    def _check_season(self) -> Self:
        if self.season_seconds > 1008 * self.step_seconds:
            raise ValueError(
                "seasonSeconds may be at most 1008 steps (e.g. a week at 10-minute steps, a day "
                "at 5): raise stepSeconds"
            )
        return self


class Calibration(ApiModel):
    """Observed TPOT against what the profile predicts for the plan in force (status
    `calibration.tpotRatio`); optionally MaxTput is scaled by a bounded, smoothed factor."""

    correct_max_tput: bool = Field(
        default=False, description="Scale every MaxTput of this service by the learned factor."
    )
    min_factor: float = Field(
        default=0.5, gt=0, le=1, description="Lowest factor (profiles at most 2× too optimistic)."
    )
    max_factor: float = Field(
        default=1.25, ge=1, le=4, description="Highest factor (profiles too pessimistic)."
    )


class Scaling(ApiModel):
    """How the plan follows the observed workload (all need `workload.source: Prometheus`)."""

    forecast: Forecast = Field(default_factory=Forecast)
    pacing: Pacing = Field(
        default="Immediate",
        description="SageServe §6.5.1: Immediate (LT-I) applies the plan at once; Utilisation "
        "(LT-U) moves one replica per observation towards it, out only while KV utilisation is "
        "above 70%, in only below 30%; UtilisationGap (LT-UA) also goes past it in the last "
        "third of the horizon when the observed rate is 5× (or 0.5×) the forecast.",
    )
    calibration: Calibration = Field(default_factory=Calibration)


class Batch(ApiModel):
    """SageServe §3.3, §6.2–6.3: requests that must finish within a deadline, not at once. Served
    first from the spare capacity of `servedBy`'s replicas (below `spareThreshold` of their
    planned load); the planner reserves own replicas only for what that spare capacity cannot
    finish in time: the arrivals (`workload.requestRate`) plus the backlog drained within the
    deadline."""

    deadline_seconds: int = Field(
        default=86400, ge=60, le=604800, description="Every request must finish this soon."
    )
    served_by: str | None = Field(
        default=None,
        min_length=1,
        description="An Interactive LLMService in this namespace serving the same model, whose "
        "replicas' spare capacity takes batch work first.",
    )
    spare_threshold: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="servedBy's replicas take batch work up to this planned utilisation.",
    )
    backlog_requests: float | None = Field(
        default=None,
        ge=0,
        le=1e9,
        description="Requests queued now, at most a billion (set by whatever queues the batch); "
        "with source Prometheus the pods' waiting requests are added.",
    )


RoutingMode = Literal["Router", "Service", "InferencePool"]


class Routing(ApiModel):
    """How clients reach the vLLM pods through the Service `<name>`. A ClusterIP Service spreads
    connections evenly and so ignores request size; the router sends each request to a pool by
    its size bucket, as the plan's routing ConfigMap `<name>-routing` says (Mélange App. A.2)."""

    mode: RoutingMode = Field(
        default="Router",
        description="Router: the Service selects `replicas` router pods (`gpumix route`) that "
        "split every size bucket across the pools as planned. Service: it selects the vLLM pods "
        "directly and no router is deployed. InferencePool: for a Gateway API Inference "
        "Extension gateway; the operator emits an InferencePool `<name>` (inference.networking"
        ".k8s.io/v1) over the vLLM pods whose endpoint picker is `replicas` pods of `gpumix "
        "route --ext-proc-port` (Service `<name>--picker`), which split the buckets as the "
        "router does (routing only: no KV migration); the Service `<name>` selects the vLLM pods "
        "and the InferencePool CRD must be installed.",
    )
    replicas: int = Field(
        default=2,
        ge=1,
        description="Router pods (mode Router) or endpoint pickers (mode InferencePool); two or "
        "more keep serving while a node drains.",
    )
    max_inflight_per_pod: int = Field(
        default=256,
        ge=1,
        description="Most requests one router holds on one vLLM pod; a request whose planned "
        "pool has every pod at this limit is answered 429 (`gpumix route "
        "--max-inflight-per-pod`).",
    )


KV_VIA_ROUTER = (
    "kvMigration.via Router needs routing.mode Router (the router holds the streams it moves); "
    "with another routing mode set kvMigration.via: Engine (engines with the admin contract)"
)


class LLMServiceSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                    "message": "minReplicas must be <= maxReplicas",
                    "fieldPath": ".minReplicas",
                },
                {
                    "rule": "!has(self.scaling) || self.workload.source == 'Prometheus' || ("
                    "(!has(self.scaling.forecast) || !self.scaling.forecast.enabled) && "
                    "(!has(self.scaling.pacing) || self.scaling.pacing == 'Immediate') && "
                    "(!has(self.scaling.calibration) || "
                    "!self.scaling.calibration.correctMaxTput))",
                    "message": "scaling.forecast, scaling.pacing and scaling.calibration need "
                    "workload.source: Prometheus (they follow the observed workload)",
                    "fieldPath": ".scaling",
                },
                {
                    "rule": "!has(self.batch) || self.priority == 'Batch'",
                    "message": "batch needs priority: Batch",
                    "fieldPath": ".batch",
                },
                {
                    "rule": "!has(self.kvMigration) || !self.kvMigration.enabled || "
                    "self.kvMigration.via != 'Router' || !has(self.routing) || "
                    "self.routing.mode == 'Router'",
                    "message": KV_VIA_ROUTER,
                    "fieldPath": ".kvMigration.via",
                },
            ]
        }
    )

    model: ModelSpec
    slo: Slo
    workload: Workload
    pools: list[str] = Field(
        default_factory=list,
        description="GPUPool names this service may use; empty means every pool.",
    )
    min_replicas: int = Field(default=0, ge=0, description="Fewest replicas across all pools.")
    max_replicas: int | None = Field(
        default=None, ge=0, description="Most replicas across all pools (unbounded if unset)."
    )
    priority: Literal["Interactive", "Batch"] = Field(
        default="Interactive",
        description="When the pools cannot serve everything, interactive services are served "
        "before batch ones.",
    )
    weight: float = Field(
        default=1.0, gt=0, le=1000, description="Within a priority, who is served first."
    )
    budget: Budget | None = Field(default=None, description="A cap on this service's $/h.")
    churn: Churn = Field(default_factory=Churn)
    kv_migration: KvMigration = Field(default_factory=KvMigration)
    scaling: Scaling = Field(default_factory=Scaling)
    batch: Batch | None = Field(default=None, description="Deadline and backlog (priority Batch).")
    routing: Routing = Field(default_factory=Routing)
    template: PodTemplate | None = Field(
        default=None,
        description="Partial pod template merged into every vLLM pod (env, volumes, resources, "
        "pull secrets, scheduling, labels); not the GPU request, the pool's node selector or "
        "the container's name, image, args and port.",
    )

    @model_validator(mode="after")
    def _check_replicas(self) -> Self:
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})"
            )
        sc = self.scaling
        follows = sc.forecast.enabled or sc.pacing != "Immediate" or sc.calibration.correct_max_tput
        if follows and self.workload.source != "Prometheus":
            raise ValueError(
                "scaling.forecast, scaling.pacing and scaling.calibration need "
                "workload.source: Prometheus (they follow the observed workload)"
            )
        if self.batch is not None and self.priority != "Batch":
            raise ValueError("batch needs priority: Batch")
        kv = self.kv_migration
        if kv.enabled and kv.via == "Router" and self.routing.mode != "Router":
            raise ValueError(KV_VIA_ROUTER)
        return self


class PoolAllocation(ApiModel):
    pool: str
    gpu_type: str
    replicas: int = Field(ge=0)
    gpus_per_replica: int = Field(default=1, ge=1)
    cost_per_hour: float = Field(ge=0)
    load: float | None = Field(
        default=None,
        ge=0,
        description="Traffic the plan places on these replicas, in replicas at full SLO "
        "capacity (≤ replicas; load ÷ replicas is the planned utilisation).",
    )
    predicted_attainment: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of the requests routed to these replicas that the simulation of the "
        "plan predicts meet the SLO (status.predictedAttainment per pool).",
    )


class Baseline(ApiModel):
    """Mélange §6.1's single-type baseline: the same ILP restricted to one GPU type."""

    gpu_type: str
    replicas: int | None = Field(default=None, description="Unset: this type alone cannot serve.")
    cost_per_hour: float | None = None


class WorkloadUsed(ApiModel):
    source: str
    request_rate: float
    over_provision: float
    planned_request_rate: float | None = Field(
        default=None,
        description="The rate the plan in force was made for (≥ request_rate within the "
        "churn tolerance).",
    )
    origin: Literal["spec", "observed", "last-observed"] | None = Field(
        default=None,
        description="Where requestRate and the histogram came from: the spec, this pass's "
        "observation, or the last good one (source Prometheus, nothing observable now).",
    )
    observed_at: datetime | None = Field(
        default=None, description="When the observation used was made (RFC 3339)."
    )
    observed_rate: float | None = Field(
        default=None,
        description="The request rate observed then (requestRate may be above it: forecast, "
        "batch reservation). After an operator restart with Prometheus down, this is the last "
        "good observation planned with, not the spec.",
    )
    observed_histogram: list[list[float]] | None = Field(
        default=None,
        description="The observed joint shares on the spec's edges (kept for restarts too).",
    )
    ttft_seconds: float | None = Field(
        default=None, description="Observed mean time to first token (seconds)."
    )
    tpot_seconds: float | None = Field(
        default=None, description="Observed mean time per output token (seconds)."
    )


class PoolShare(ApiModel):
    pool: str
    gpus: int = Field(ge=0)
    percent: float | None = Field(
        default=None, description="Share of the pool's GPUs the planner may place (percent)."
    )


class KvScaleIn(ApiModel):
    option: str = Field(description="The pool (plus -tp<k>) whose Deployment runs fewer replicas.")
    planned_replicas: int = Field(
        ge=0, description="The planner's target this applies to; a new target voids it."
    )
    removed: int = Field(ge=0, description="Replicas the KV scheduler emptied and removed.")


class KvSchedulerStatus(ApiModel):
    """Written only by the KV-migration loop (a merge patch of this field); the planner reads
    `scaledIn` and applies its target minus `removed` (its target stays the upper bound)."""

    last_pass: str | None = None
    migrations: int = Field(default=0, ge=0, description="Requests migrated so far.")
    drained_pods: list[str] = Field(
        default_factory=list, description="The latest pods emptied for removal (at most 10)."
    )
    scaled_in: list[KvScaleIn] = Field(default_factory=list)
    message: str | None = None


class ForecastStatus(ApiModel):
    method: str = Field(description="holt-winters, seasonal-naive, naive or none (no history).")
    observed_rate: float | None = Field(default=None, description="The rate observed now.")
    history_points: int = Field(ge=0, description="Rate samples the forecast was fitted on.")
    peak_rate: float = Field(description="Forecast peak over the horizon (req/s).")
    next_rate: float | None = Field(default=None, description="Forecast for the next step.")
    horizon_seconds: int
    planned_rate: float = Field(description="max(peak, observed) × (1 + buffer): planned for.")


class CalibrationStatus(ApiModel):
    observed_at: datetime | None = Field(default=None, description="The observation compared.")
    tpot_ratio: float | None = Field(
        default=None, description="Observed / profile-predicted TPOT for the plan in force."
    )
    predicted_tpot_ms: float | None = None
    prediction: str | None = Field(
        default=None, description="exact, at-most or at-least (outside the profile's SLO range)."
    )
    max_tput_factor: float = Field(
        default=1.0, description="MaxTput multiplier learned so far (applied if correctMaxTput)."
    )
    message: str | None = None


class PacingStatus(ApiModel):
    mode: str
    target_summary: str = Field(description="The plan's replicas, e.g. 'a10g=3,l4=1'.")
    applied_summary: str = Field(description="Replicas applied now on the way there.")
    last_step_observed_at: datetime | None = Field(
        default=None, description="Observation that allowed the last step (one step each)."
    )
    message: str | None = None


class BatchStatus(ApiModel):
    backlog_requests: float = Field(ge=0, description="Requests queued now.")
    arrival_rate: float = Field(ge=0, description="Batch requests arriving per second.")
    deadline_seconds: int
    served_by: str | None = None
    spare_rate: float = Field(
        default=0.0, ge=0, description="Req/s servedBy's replicas take below spareThreshold."
    )
    reserved_rate: float = Field(
        default=0.0, ge=0, description="Req/s this service's own replicas are planned for."
    )
    drain_seconds: float | None = Field(
        default=None, description="When the backlog is empty at the planned rates (estimate)."
    )


class OptionDerating(ApiModel):
    option: str = Field(description="The pool (plus -tp<k>) whose MaxTput is derated.")
    factor: float = Field(gt=0, le=1, description="Factor on its profiled MaxTput.")


class DeratingStatus(ApiModel):
    """The operator's attainment loop: where a plan is predicted to miss slo.attainmentTarget,
    the options whose pools miss it are planned at less than their profiled MaxTput and the
    joint plan solved again; later passes start from these factors."""

    observed_generation: int | None = Field(
        default=None, description="The spec generation these factors were found for."
    )
    options: list[OptionDerating] = Field(
        default_factory=list,
        description="Derated options; the others are planned at their MaxTput.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["option"],
        },
    )
    rounds: int = Field(
        default=0, ge=0, description="Derating rounds that led to these factors at that generation."
    )
    basis: str | None = Field(
        default=None,
        description="Digest of the spec the search ran for, less workload.requestRate: a new "
        "generation that changed only the rate searches again from these factors.",
    )
    kept_at_rate: float | None = Field(
        default=None,
        ge=0,
        description="The planned request rate at which the plan in force, which holds the "
        "target, is kept: a fleet solve would have moved the service onto a plan predicted to "
        "miss it. Later passes keep that plan while this generation and rate stand.",
    )
    searching: bool = Field(
        default=False,
        description="The search was cut at its time slice (gpumix run --search-slice) in the "
        "pass a change started it in: the plan in force is the best it found so far, and the "
        "next pass searches on from these factors.",
    )

    def factors(self) -> dict[str, float]:
        """Option → factor (absent: 1)."""
        return {o.option: o.factor for o in self.options}


class LLMServiceStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    allocation: list[PoolAllocation] = Field(default_factory=list)
    cost_per_hour: float | None = Field(default=None, description="$/h of the allocation.")
    baselines: list[Baseline] = Field(default_factory=list)
    savings_percent: float | None = Field(
        default=None, description="Saving against the cheapest single-type baseline."
    )
    solve_seconds: float | None = None
    workload: WorkloadUsed | None = None
    replicas_summary: str | None = Field(
        default=None, description="Replicas per pool, e.g. 'a100-80gb=1,l4=2'."
    )
    unserved_fraction: float | None = Field(
        default=None, description="Fraction of the request rate the plan cannot serve."
    )
    unserved_reason: str | None = Field(default=None, description="Why traffic is unserved.")
    predicted_attainment: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of requests predicted to meet TPOT and (when set) TTFT under the plan "
        "in force, simulated as the router routes it (as `gpumix plan` predicts offline). "
        "Condition SLOAtRisk compares it with slo.attainmentTarget; unset when the prediction "
        "failed.",
    )
    pool_shares: list[PoolShare] = Field(
        default_factory=list, description="GPUs this service holds in each pool."
    )
    derating: DeratingStatus | None = Field(
        default=None,
        description="MaxTput derating the planner applies to bring predictedAttainment up to "
        "slo.attainmentTarget (unset: none); a new spec generation searches again, from these "
        "factors when it changed only workload.requestRate.",
    )
    kv_scheduler: KvSchedulerStatus | None = None
    applied_digest: str | None = Field(
        default=None,
        description="Digest of the objects last applied for this service, all without error: "
        "an operator that restarts or takes over the Lease does not apply them again while "
        "they are unchanged.",
    )
    forecast: ForecastStatus | None = None
    calibration: CalibrationStatus | None = None
    pacing: PacingStatus | None = None
    batch: BatchStatus | None = None


class LLMService(Resource):
    """A model served under a latency SLO on the cheapest mix of GPU pools that meets it."""

    kind_name: ClassVar[str] = "LLMService"
    plural: ClassVar[str] = "llmservices"
    scope: ClassVar[Literal["Namespaced", "Cluster"]] = "Namespaced"
    short_names: ClassVar[tuple[str, ...]] = ("llms",)
    printer_columns: ClassVar[tuple[dict[str, str | int], ...]] = (
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason"},
        {"name": "$/h", "type": "number", "jsonPath": ".status.costPerHour"},
        {"name": "Savings%", "type": "number", "jsonPath": ".status.savingsPercent"},
        {"name": "Replicas", "type": "string", "jsonPath": ".status.replicasSummary"},
        {"name": "Unserved", "type": "number", "jsonPath": ".status.unservedFraction"},
        {"name": "Predicted", "type": "number", "jsonPath": ".status.predictedAttainment"},
        {
            "name": "Rate",
            "type": "number",
            "jsonPath": ".status.workload.plannedRequestRate",
            "priority": 1,
        },
        {
            "name": "Backlog",
            "type": "number",
            "jsonPath": ".status.batch.backlogRequests",
            "priority": 1,
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    max_name_length: ClassVar[int | None] = 63
    kind: Literal["LLMService"] = "LLMService"
    spec: LLMServiceSpec
    status: LLMServiceStatus | None = None
