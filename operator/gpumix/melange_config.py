"""The Mélange reference solver's JSON input, so users of that tool can switch to `gpumix plan`.

Keys: `gpu_info` ({name: {cost, tputs}} or a list of {name, cost, tputs}), `workload_distribution`
(fractions per bucket, rows = input sizes), `total_request_rate` (or `overall_rate`) and
`slice_factor`.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpumix.plan import AllocationInstance, GPUOption


class MelangeGPU(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cost: float = Field(gt=0)
    tputs: list[list[float]]


class MelangeConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    gpu_info: dict[str, MelangeGPU]
    workload_distribution: list[list[float]]
    total_request_rate: float = Field(ge=0, validation_alias="total_request_rate")
    slice_factor: int = Field(default=8, ge=1)

    @field_validator("gpu_info", mode="before")
    @classmethod
    def _list_form(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {item["name"]: item for item in value}
        return value

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MelangeConfig":
        if "total_request_rate" not in data and "overall_rate" in data:
            data = {**data, "total_request_rate": data["overall_rate"]}
        return cls.model_validate(data)

    def instance(self) -> AllocationInstance:
        rate = self.total_request_rate
        return AllocationInstance(
            rates=[[rate * f for f in row] for row in self.workload_distribution],
            gpus=[
                GPUOption(name=name, cost_per_hour=gpu.cost, max_tput=gpu.tputs)
                for name, gpu in self.gpu_info.items()
            ],
            slice_factor=self.slice_factor,
        )
