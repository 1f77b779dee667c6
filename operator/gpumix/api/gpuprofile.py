"""GPUProfile: measured (or estimated) performance of one model on one GPU type, Mélange §5.3."""

from typing import ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gpumix.api.base import ApiModel, Resource
from gpumix.api.buckets import BucketGrid, Row, check_matrix, matrix_field

TPDegree = Literal[1, 2, 4, 8]
"""GPUs per replica (tensor-parallel degree) that vLLM supports within one node."""


MIN_MAX_TPUT = 1e-3
"""Smallest non-zero MaxTput (req/s per replica): a replica slower than one request in 1000 s
serves nothing; at 1e-300 the joint ILP, which plans every service together, failed for all."""


class SloTable(ApiModel):
    """Mélange's table form: MaxTput per bucket at one TPOT SLO."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.maxTput.all(r, r.all(v, v == 0.0 || v >= {MIN_MAX_TPUT}))",
                    "message": "maxTput values must be 0 (cannot serve) or "
                    f">= {MIN_MAX_TPUT} req/s",
                    "fieldPath": ".maxTput",
                }
            ]
        }
    )

    tpot_ms: float = Field(gt=0, description="The TPOT SLO these throughputs were measured at.")
    max_tput: list[Row] = matrix_field(
        "Highest req/s meeting the SLO, one row per input bucket; 0 = cannot serve."
    )

    @model_validator(mode="after")
    def _check_tiny(self) -> Self:
        for i, row in enumerate(self.max_tput):
            if any(0 < v < MIN_MAX_TPUT for v in row):
                raise ValueError(
                    f"maxTput[{i}]: values must be 0 (cannot serve) or >= {MIN_MAX_TPUT} req/s, "
                    f"got {row}"
                )
        return self


class RatePoint(ApiModel):
    rate: float = Field(ge=0, le=1e6, description="Offered request rate (req/s).")
    tpot_ms: float = Field(ge=0, description="Mean TPOT observed at that rate.")
    ttft_ms: float | None = Field(default=None, ge=0, description="Mean TTFT at that rate.")


class BucketSamples(ApiModel):
    """Latency-vs-rate samples for one bucket, from which MaxTput(SLO) is derived (§5.3)."""

    input_bucket: int = Field(ge=0)
    output_bucket: int = Field(ge=0)
    points: list[RatePoint] = Field(min_length=1, max_length=256)


class GPUProfileSpec(BucketGrid):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.tables) != has(self.samples)",
                    "message": "set exactly one of tables or samples",
                },
                {
                    "rule": (
                        "!has(self.tables) || self.tables.all(t, "
                        "size(t.maxTput) == size(self.inputEdges) - 1 && "
                        "t.maxTput.all(r, size(r) == size(self.outputEdges) - 1))"
                    ),
                    "message": "every tables[].maxTput must have size(inputEdges) - 1 rows "
                    "of size(outputEdges) - 1 values",
                    "fieldPath": ".tables",
                },
                {
                    "rule": (
                        "!has(self.samples) || self.samples.all(s, "
                        "s.inputBucket < size(self.inputEdges) - 1 && "
                        "s.outputBucket < size(self.outputEdges) - 1)"
                    ),
                    "message": "samples[].inputBucket/outputBucket must index a bucket",
                    "fieldPath": ".samples",
                },
            ]
        }
    )

    model: str = Field(min_length=1, description="Model id, matched against LLMService model.name.")
    gpu_type: str = Field(min_length=1, description="GPU type, matched against GPUPool gpuType.")
    gpus_per_replica: TPDegree = Field(
        default=1, description="GPUs one replica uses (tensor parallel degree)."
    )
    tables: list[SloTable] | None = Field(default=None, min_length=1, max_length=16)
    samples: list[BucketSamples] | None = Field(default=None, min_length=1, max_length=1024)
    source: str = Field(default="", description="Where these numbers come from.")

    @model_validator(mode="after")
    def _check_form(self) -> Self:
        if (self.tables is None) == (self.samples is None):
            raise ValueError("set exactly one of tables or samples")
        for k, table in enumerate(self.tables or []):
            check_matrix(f"tables[{k}].maxTput", table.max_tput, self.shape)
        rows, cols = self.shape
        for k, s in enumerate(self.samples or []):
            if s.input_bucket >= rows or s.output_bucket >= cols:
                raise ValueError(
                    f"samples[{k}]: bucket ({s.input_bucket}, {s.output_bucket}) is outside the "
                    f"{rows}x{cols} grid of the edges"
                )
        return self


class GPUProfile(Resource):
    """What one GPU type (k GPUs per replica) can do for one model: MaxTput per bucket (§5.3)."""

    kind_name: ClassVar[str] = "GPUProfile"
    plural: ClassVar[str] = "gpuprofiles"
    scope: ClassVar[Literal["Namespaced", "Cluster"]] = "Cluster"
    short_names: ClassVar[tuple[str, ...]] = ("gprof",)
    printer_columns: ClassVar[tuple[dict[str, str | int], ...]] = (
        {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
        {"name": "GPU", "type": "string", "jsonPath": ".spec.gpuType"},
        {"name": "GPUs/replica", "type": "integer", "jsonPath": ".spec.gpusPerReplica"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    kind: Literal["GPUProfile"] = "GPUProfile"
    spec: GPUProfileSpec
