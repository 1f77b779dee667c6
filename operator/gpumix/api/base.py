"""Shared pieces of the gpumix.io/v1alpha1 API: the camelCase base model and status conditions."""

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "gpumix.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class ApiModel(BaseModel):
    """A part of a custom resource: camelCase on the wire, unknown fields rejected like kubectl's
    strict field validation, so a typo in a hand-written file fails with the field's name."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
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


class Resource(ApiModel):
    """Top-level custom resource: what kubectl would send, with metadata kept opaque."""

    kind_name: ClassVar[str]
    plural: ClassVar[str]
    scope: ClassVar[Literal["Namespaced", "Cluster"]]
    short_names: ClassVar[tuple[str, ...]] = ()
    printer_columns: ClassVar[tuple[dict[str, str | int], ...]] = ()

    api_version: Literal["gpumix.io/v1alpha1"] = "gpumix.io/v1alpha1"
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))
