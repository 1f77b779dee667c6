"""spec.template: what a user adds to every vLLM pod gpumix renders for a service.

A partial pod template, merged by :func:`gpumix.render.podtemplate.apply_template` into each
pool's Deployment (and, where it makes sense, the model-cache Job): the Secret with a Hugging Face
token, volumes, CPU and memory, pull secrets, scheduling constraints of the user's own, labels and
annotations. What the plan relies on stays gpumix's: the GPU request, the pool's node selector,
the container's name, image, arguments and port, and the selector labels. The schema refuses
those at ``kubectl apply`` (fields absent from the schema, CEL rules naming the field); a node
selector key the pool also sets cannot be checked there (the pool is another object), so the pool
wins and condition ``PodsMatchPlan`` names the key.
"""

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
    model_validator,
)

from gpumix.api.base import ApiModel
from gpumix.api.gpupool import Toleration

GPU_RESOURCE = "nvidia.com/gpu"
RESERVED_LABEL_PREFIX = "gpumix.io/"
RESERVED_VOLUMES = ("dshm", "model-cache")
"""Volumes gpumix mounts itself: /dev/shm for NCCL, and the model cache (``spec.model.cache``)."""
CONTAINER: Literal["vllm"] = "vllm"


def _as_quantity(value: object) -> object:
    """``cpu: 8`` as well as ``cpu: "8"``: YAML users write both; the apiserver stores strings."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


Quantity = Annotated[
    str,
    BeforeValidator(_as_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True}),
]
Opaque = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""A core/v1 structure passed through as written (the apiserver checks it with the Deployment)."""


class LocalObjectReference(ApiModel):
    name: str = Field(min_length=1)


class SourceReference(ApiModel):
    name: str = Field(min_length=1)
    optional: bool | None = None


class EnvFromSource(ApiModel):
    prefix: str | None = None
    config_map_ref: SourceReference | None = None
    secret_ref: SourceReference | None = None


class EnvVar(ApiModel):
    name: str = Field(min_length=1)
    value: str | None = None
    value_from: Opaque | None = Field(
        default=None, description="secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef."
    )


class VolumeMount(ApiModel):
    name: str = Field(min_length=1)
    mount_path: str = Field(min_length=1)
    read_only: bool | None = None
    sub_path: str | None = None


class Volume(ApiModel):
    """A core/v1 Volume: `name` plus one volume source, passed through as written."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    name: str = Field(min_length=1)


_NO_GPU: dict[str, JsonValue] = {
    "rule": f"!('{GPU_RESOURCE}' in self)",
    "message": f"{GPU_RESOURCE} is set by gpumix from the pool's GPUs per replica",
}


class Resources(ApiModel):
    """CPU, memory and other resources of the vLLM container (not GPUs: the plan sets those)."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-validations": [_NO_GPU]}
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-validations": [_NO_GPU]}
    )

    @model_validator(mode="after")
    def _no_gpu(self) -> Self:
        for field, values in (("requests", self.requests), ("limits", self.limits)):
            if GPU_RESOURCE in values:
                raise ValueError(f"{field}: {_NO_GPU['message']}")
        return self


class ContainerPatch(ApiModel):
    """Added to the vLLM container; its image and arguments are spec.model's, its port gpumix's."""

    name: Literal["vllm"] = Field(
        default=CONTAINER, description="The vLLM container, the only one a template patches."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        description="Added after gpumix's own (HF_HOME with a cache); a name both set is the "
        "user's.",
    )
    env_from: list[EnvFromSource] = Field(default_factory=list)
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)


class PodSpecPatch(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.volumes) || self.volumes.all(v, !(v.name in "
                    f"{list(RESERVED_VOLUMES)}))",
                    "message": f"volume names {', '.join(RESERVED_VOLUMES)} are gpumix's",
                    "fieldPath": ".volumes",
                },
            ]
        }
    )

    service_account_name: str | None = None
    priority_class_name: str | None = None
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Added to the pool's node selector; a key the pool sets keeps its value.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Added to the pool's tolerations."
    )
    affinity: Opaque | None = None
    volumes: list[Volume] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    )
    containers: list[ContainerPatch] = Field(
        default_factory=list, max_length=1, description="At most one: the vLLM container."
    )

    @model_validator(mode="after")
    def _own_volumes(self) -> Self:
        taken = [v.name for v in self.volumes if v.name in RESERVED_VOLUMES]
        if taken:
            raise ValueError(f"volumes: volume names {', '.join(RESERVED_VOLUMES)} are gpumix's")
        return self


class TemplateMetadata(ApiModel):
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Added to the pods; gpumix's own labels keep their values.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.all(k, !k.startsWith('{RESERVED_LABEL_PREFIX}'))",
                    "message": f"labels under {RESERVED_LABEL_PREFIX} select gpumix's pods",
                }
            ]
        },
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Added to the pods; the user's win over gpumix's."
    )

    @model_validator(mode="after")
    def _own_labels(self) -> Self:
        if any(k.startswith(RESERVED_LABEL_PREFIX) for k in self.labels):
            raise ValueError(f"labels: labels under {RESERVED_LABEL_PREFIX} select gpumix's pods")
        return self


class PodTemplate(ApiModel):
    """A partial pod template merged into every vLLM pod of the service (README: "Serving a gated
    model" lists the merge rules)."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: PodSpecPatch = Field(default_factory=PodSpecPatch)

    @property
    def container(self) -> ContainerPatch:
        """The vLLM container's patch (empty when the template has none)."""
        return self.spec.containers[0] if self.spec.containers else ContainerPatch()


class ModelCache(ApiModel):
    """A PersistentVolumeClaim filled once by a Job (``hf`` download into HF_HOME) and mounted
    read-only into every vLLM pod, which waits for it in an init container and then loads the
    weights from it offline: a new replica starts without a download from the Hub."""

    size: Quantity = Field(description="Storage to request, e.g. 60Gi (weights and tokenizer).")
    storage_class_name: str | None = Field(
        default=None,
        description="A class whose volumes many nodes mount at once (ReadWriteMany: NFS, "
        "CephFS, EFS, Filestore…); default the cluster's default class.",
    )
