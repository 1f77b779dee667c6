"""Names, labels and owner references shared by every child object of an LLMService.

Names are deterministic so that server-side apply (field manager ``gpumix``) finds the same
object on every reconcile; they are DNS-1123 labels so that they are valid for every kind we
render (a Service name must be a label, and pod hostnames derive from Deployment names).
"""

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpumix.api import API_VERSION

FIELD_MANAGER = "gpumix"
"""The field manager the operator uses when it server-side-applies what this package renders."""

MAX_LABEL = 63
"""Longest DNS-1123 label, and longest label value."""

HASH_CHARS = 8
"""Hex digits of SHA-256 appended to a shortened name: 32 bits, plenty within one namespace."""

SERVICE_LABEL = "gpumix.io/service"
POOL_LABEL = "gpumix.io/pool"
TP_LABEL = "gpumix.io/gpus-per-replica"
"""Set (and in the selector) only on Deployments of replicas with more than one GPU, so that the
immutable selectors of existing one-GPU Deployments never change."""
ROUTER_LABEL = "gpumix.io/router"
"""On the router's pods instead of ``gpumix.io/service``, so that no selector of the vLLM pods
(the Deployments', the headless Service's, the KV loop's) ever matches a router."""

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


class Owner(BaseModel):
    """The LLMService that owns (and, through garbage collection, deletes) every child object."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    uid: str
    api_version: str = API_VERSION
    kind: str = "LLMService"


def is_dns1123_label(name: str) -> bool:
    return len(name) <= MAX_LABEL and _DNS1123_LABEL.fullmatch(name) is not None


def is_dns1035_label(name: str) -> bool:
    return len(name) <= MAX_LABEL and _DNS1035_LABEL.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return len(value) <= MAX_LABEL and _LABEL_VALUE.fullmatch(value) is not None


def _digest(*parts: str) -> str:
    # NUL cannot occur in a Kubernetes name, so ("a-b", "c") and ("a", "b-c") hash differently.
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:HASH_CHARS]


def _shorten(name: str, parts: tuple[str, ...], *, letter_first: bool) -> str:
    """``name`` squeezed into a DNS-1123 label with a hash of ``parts`` (the unmangled inputs)
    appended, so distinct inputs keep distinct names after truncation or character folding."""
    room = MAX_LABEL - HASH_CHARS - 1
    stem = re.sub(r"[^a-z0-9-]+", "-", name.lower())[:room].strip("-")
    if letter_first and stem and not stem[0].isalpha():
        stem = ("x" + stem)[:room].rstrip("-")
    return f"{stem}-{_digest(*parts)}" if stem else f"x{_digest(*parts)}"


def safe_name(*parts: str, dns1035: bool = False) -> str:
    """``"-".join(parts)`` when that is a DNS-1123 label (DNS-1035 with ``dns1035``: a Service
    name must start with a letter), else a shortened name ending in a stable hash of ``parts``.

    LLMService and GPUPool names are DNS subdomains (up to 253 characters, dots allowed), but the
    objects we derive from them need labels; ordinary names pass through unchanged.
    """
    joined = "-".join(parts)
    valid = is_dns1035_label(joined) if dns1035 else is_dns1123_label(joined)
    return joined if valid else _shorten(joined, parts, letter_first=dns1035)


def label_value(value: str) -> str:
    """``value`` itself when it is a valid label value, else a shortened form with a stable hash."""
    return value if is_label_value(value) else _shorten(value, (value,), letter_first=False)


def deployment_name(service: str, pool: str, gpus_per_replica: int = 1) -> str:
    """``<service>-<pool>`` for one-GPU replicas, ``<service>-<pool>-tp<k>`` for ``k``-GPU
    (tensor-parallel) replicas: one Deployment per (service, pool, replica size), so that the
    planner can run several replica configurations in one pool (Jiang et al. §4.3).

    Two services whose names only differ in where a dash splits them (``a-b``/``c`` and
    ``a``/``b-c``) would share a name; the apiserver then refuses the second controller owner
    reference instead of letting one service take over the other's Deployment.
    """
    if gpus_per_replica == 1:
        return safe_name(service, pool)
    return safe_name(service, pool, f"tp{gpus_per_replica}")


def service_name(service: str) -> str:
    """``<service>``: the one Service in front of all the service's pods (a DNS-1035 label)."""
    return safe_name(service, dns1035=True)


def routing_configmap_name(service: str) -> str:
    """``<service>-routing``: the ConfigMap holding the Mélange App. A.2 routing weights."""
    return safe_name(service, "routing")


def _role_name(service: str, role: str, *, dns1035: bool = False) -> str:
    """``<service>--<role>``, which no :func:`deployment_name` of the service can be: that would
    take a pool whose name starts with a dash (a pool named ``router`` has the Deployment
    ``<service>-router``). Shortened, the name hashes an empty part, which no pool name is."""
    return safe_name(service, "", role, dns1035=dns1035)


def router_name(service: str) -> str:
    """``<service>--router``: the router's Deployment, PodDisruptionBudget, ServiceAccount, Role
    and RoleBinding (one name for the lot: each kind has its own namespace of names)."""
    return _role_name(service, "router")


def picker_service_name(service: str) -> str:
    """``<service>--picker``: the Service over the endpoint pickers (routing mode
    InferencePool), which the InferencePool's ``endpointPickerRef`` names (a DNS-1035 label)."""
    return _role_name(service, "picker", dns1035=True)


def engines_service_name(service: str) -> str:
    """``<service>--engines``: the headless Service over the vLLM pods (a DNS-1035 label)."""
    return _role_name(service, "engines", dns1035=True)


def cache_claim_name(service: str) -> str:
    """``<service>--model-cache``: the PersistentVolumeClaim holding the model's weights."""
    return _role_name(service, "model-cache")


def cache_key(text: str) -> str:
    """A stable short key of ``text``: a model's done-marker, the download Job's suffix."""
    return _digest(text)


def cache_job_name(service: str, pod_template: str) -> str:
    """``<service>--model-cache-<key>`` with a key of the Job's pod template: a Job's template
    is immutable, so another model or env gets a new Job (which finds what is already cached)."""
    return safe_name(service, "", "model-cache", cache_key(pod_template))


def _app_labels(service: str, name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": label_value(service),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "gpumix",
        "app.kubernetes.io/managed-by": "gpumix",
    }


ENGINE_LABELS = {
    key: value
    for key, value in _app_labels("", "vllm", "server").items()
    if key != "app.kubernetes.io/instance"
}
"""The labels the vLLM pods of every service share: they select the engines of all services."""


def labels_for(service: str, pool: str | None = None, gpus_per_replica: int = 1) -> dict[str, str]:
    """The standard ``app.kubernetes.io/*`` labels plus gpumix's own selector labels.

    ``gpumix.io/service`` selects every pod of the service (the Service's selector);
    ``gpumix.io/pool`` narrows that to one Deployment. Values longer than a label allows are
    shortened with a hash, so the owner reference, not the label, is the authoritative link.
    """
    labels = {**_app_labels(service, "vllm", "server"), SERVICE_LABEL: label_value(service)}
    if pool is not None:
        labels[POOL_LABEL] = label_value(pool)
        if gpus_per_replica != 1:
            labels[TP_LABEL] = str(gpus_per_replica)
    return dict(sorted(labels.items()))


def selector_for(
    service: str, pool: str | None = None, gpus_per_replica: int = 1
) -> dict[str, str]:
    """The minimal selector: label selectors of Deployments are immutable, so they hold only what
    identifies the pods and never the descriptive ``app.kubernetes.io/*`` labels."""
    labels = labels_for(service, pool, gpus_per_replica)
    keys = (SERVICE_LABEL,) if pool is None else (POOL_LABEL, SERVICE_LABEL, TP_LABEL)
    return {key: labels[key] for key in keys if key in labels}


def router_labels(service: str) -> dict[str, str]:
    """The router's objects and pods: ``gpumix.io/router``, never ``gpumix.io/service``."""
    labels = {**_app_labels(service, "gpumix-router", "router"), ROUTER_LABEL: label_value(service)}
    return dict(sorted(labels.items()))


def cache_labels(service: str) -> dict[str, str]:
    """The model-cache claim, Job and download pod: no selector label of the vLLM pods."""
    return dict(sorted(_app_labels(service, "gpumix-model-cache", "model-cache").items()))


PICKER_COMPONENT = "endpoint-picker"


def picker_labels(service: str) -> dict[str, str]:
    """The router Deployment and pods in routing mode InferencePool, where they are endpoint
    pickers: the router's selector label (one Deployment whichever the mode, so a switch rolls
    it), another ``app.kubernetes.io`` name and component."""
    picker = _app_labels(service, "gpumix-endpoint-picker", PICKER_COMPONENT)
    return dict(sorted({**picker, ROUTER_LABEL: label_value(service)}.items()))


def router_selector(service: str) -> dict[str, str]:
    """The router pods of ``service``: the Deployment's immutable selector, the PDB's and, in
    routing mode Router, the Service ``<service>``'s."""
    return {ROUTER_LABEL: label_value(service)}


def owner_reference(owner: Owner) -> dict[str, Any]:
    """The controller reference: garbage collection deletes the child with the LLMService, and
    ``blockOwnerDeletion`` keeps the owner around under foreground deletion until it is gone."""
    return {
        "apiVersion": owner.api_version,
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": owner.kind,
        "name": owner.name,
        "uid": owner.uid,
    }


def object_meta(owner: Owner, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "labels": labels,
        "name": name,
        "namespace": owner.namespace,
        "ownerReferences": [owner_reference(owner)],
    }
