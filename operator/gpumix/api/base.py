"""Shared pieces of the gpumix.io/v1alpha1 API: the camelCase base model and status conditions."""

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

GROUP = "gpumix.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class ApiModel(BaseModel):
    """A part of a custom resource: camelCase on the wire, unknown fields rejected like kubectl's
    strict field validation, so a typo in a hand-written file fails with the field's name."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,  # JSON has no NaN or infinity; YAML's .nan/.inf must not get in
    )


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A status condition shaped like metav1.Condition."""

    type: str = Field(description="Condition type, e.g. Ready, Planned, Degraded.")
    status: ConditionStatus
    reason: str = Field(description="CamelCase reason from a closed set.")
    message: str = ""
    last_transition_time: datetime | None = Field(
        default=None, description="When status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(default=None, ge=0)


def name_rule(limit: int) -> dict[str, str]:
    """The CEL rule (on the whole object: CEL sees metadata.name there) capping the name."""
    return {
        "rule": f"size(self.metadata.name) <= {limit}",
        "message": f"metadata.name: at most {limit} characters: the operator labels the objects "
        "it derives (gpumix.io/service, gpumix.io/pool) with it, and reads them back by it",
    }


class Resource(ApiModel):
    """Top-level custom resource: what kubectl would send, with metadata kept opaque."""

    kind_name: ClassVar[str]
    plural: ClassVar[str]
    scope: ClassVar[Literal["Namespaced", "Cluster"]]
    short_names: ClassVar[tuple[str, ...]] = ()
    printer_columns: ClassVar[tuple[dict[str, str | int], ...]] = ()
    max_name_length: ClassVar[int | None] = None
    """Longest metadata.name, when the objects gpumix derives carry it as a label value (63)."""

    api_version: Literal["gpumix.io/v1alpha1"] = "gpumix.io/v1alpha1"
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_name(self) -> Self:
        limit = self.max_name_length
        if limit is not None and len(self.name) > limit:
            raise ValueError(name_rule(limit)["message"])
        return self

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))
