"""The model cache (``spec.model.cache``): a shared volume the weights are downloaded into once.

Replicas come and go as plans change; without a cache each new one downloads tens of GiB from the
Hugging Face Hub before it is Ready. With one, the operator applies, in this order, a
PersistentVolumeClaim (ReadWriteMany), a Job that downloads the model into it (Hugging Face's
cache layout under ``HF_HOME``, with the template's env, so ``HF_TOKEN`` reaches it) and writes a
done-marker, and the Deployments, whose pods mount the claim read-only, wait in an init container
for the marker, and run vLLM with ``HF_HUB_OFFLINE=1`` (nothing is fetched, nothing written).
"""

import json
from typing import Any

from gpumix.api import LLMServiceSpec, PodTemplate
from gpumix.api.podtemplate import Resources
from gpumix.render.names import (
    Owner,
    cache_claim_name,
    cache_job_name,
    cache_key,
    cache_labels,
    object_meta,
)
from gpumix.render.podtemplate import apply_template

VOLUME = "model-cache"
MOUNT_PATH = "/model-cache"
WAIT_CONTAINER = "wait-for-model-cache"
DOWNLOAD_CONTAINER = "download"
DOWNLOAD_BACKOFF_LIMIT = 6
"""Download retries before the Job fails (the Hub rate-limits and drops long transfers)."""

_DOWNLOAD = """\
import os, pathlib
from huggingface_hub import snapshot_download
snapshot_download(os.environ["GPUMIX_MODEL"], ignore_patterns=["original/*"])
done = pathlib.Path(os.environ["GPUMIX_CACHE_DONE"])
done.parent.mkdir(parents=True, exist_ok=True)
done.touch()
"""
"""Everything vLLM loads (``original/`` holds a second copy of Llama's weights in Meta's format);
the huggingface_hub library ships in the vLLM image, so no other image is pulled."""


def _done_marker(model: str) -> str:
    return f"{MOUNT_PATH}/.gpumix/{cache_key(model)}.done"


def _volume(owner: Owner, *, read_only: bool) -> dict[str, Any]:
    claim: dict[str, Any] = {"claimName": cache_claim_name(owner.name)}
    if read_only:
        claim["readOnly"] = True
    return {"name": VOLUME, "persistentVolumeClaim": claim}


def _mount(*, read_only: bool) -> dict[str, Any]:
    mount: dict[str, Any] = {"mountPath": MOUNT_PATH, "name": VOLUME}
    if read_only:
        mount["readOnly"] = True
    return mount


def with_cache(pod: dict[str, Any], owner: Owner, spec: LLMServiceSpec) -> dict[str, Any]:
    """A vLLM pod template (main container first) reading the model from the cache: the claim
    mounted read-only, ``HF_HOME`` on it, offline, and an init container that waits for the
    download Job's marker (so a pod never starts vLLM on a half-filled cache)."""
    if spec.model.cache is None:
        return pod
    main, *rest = pod["spec"]["containers"]
    env = [
        {"name": "HF_HOME", "value": MOUNT_PATH},
        {"name": "HF_HUB_OFFLINE", "value": "1"},
    ]
    marker = _done_marker(spec.model.name)
    wait = {
        "command": [
            "sh",
            "-c",
            f'until [ -f "{marker}" ]; do echo "waiting for the model cache ({marker})"; '
            "sleep 10; done",
        ],
        "image": spec.model.image,
        "name": WAIT_CONTAINER,
        "volumeMounts": [_mount(read_only=True)],
    }
    main = {
        **main,
        "env": [*main.get("env", []), *env],
        "volumeMounts": [*main.get("volumeMounts", []), _mount(read_only=True)],
    }
    pod_spec = {
        **pod["spec"],
        "containers": [main, *rest],
        "initContainers": [wait],
        "volumes": [*pod["spec"].get("volumes", []), _volume(owner, read_only=True)],
    }
    return {**pod, "spec": pod_spec}


def render_cache_claim(owner: Owner, spec: LLMServiceSpec) -> dict[str, Any]:
    """The v1 PersistentVolumeClaim the weights live in (ReadWriteMany: one Job writes, the pods
    of every pool read, on many nodes)."""
    cache = spec.model.cache
    assert cache is not None
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class_name is not None:
        claim_spec["storageClassName"] = cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(owner, cache_claim_name(owner.name), cache_labels(owner.name)),
        "spec": claim_spec,
    }


def _for_download(template: PodTemplate | None) -> PodTemplate | None:
    """What of the template the download pod takes: env (``HF_TOKEN``), volumes, pull secrets,
    service account, node selector, tolerations, labels; not the vLLM pod's CPU and memory,
    affinity or priority class."""
    if template is None:
        return None
    container = template.container.model_copy(update={"resources": Resources()})
    spec = template.spec.model_copy(
        update={"priority_class_name": None, "affinity": None, "containers": [container]}
    )
    return PodTemplate(metadata=template.metadata, spec=spec)


def render_cache_job(owner: Owner, spec: LLMServiceSpec) -> dict[str, Any]:
    """The batch/v1 Job that downloads ``spec.model.name`` into the claim, then the marker."""
    labels = cache_labels(owner.name)
    model = spec.model.name
    container = {
        "command": ["python3", "-c", _DOWNLOAD],
        "env": [
            {"name": "HF_HOME", "value": MOUNT_PATH},
            {"name": "GPUMIX_MODEL", "value": model},
            {"name": "GPUMIX_CACHE_DONE", "value": _done_marker(model)},
        ],
        "image": spec.model.image,
        "name": DOWNLOAD_CONTAINER,
        "volumeMounts": [_mount(read_only=False)],
    }
    pod = {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "containers": [container],
            "restartPolicy": "OnFailure",
            "volumes": [_volume(owner, read_only=False)],
        },
    }
    template = apply_template(pod, _for_download(spec.template))
    name = cache_job_name(owner.name, json.dumps(template, sort_keys=True))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(owner, name, labels),
        "spec": {"backoffLimit": DOWNLOAD_BACKOFF_LIMIT, "template": template},
    }
