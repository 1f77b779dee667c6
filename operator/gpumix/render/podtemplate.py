"""Merging a user's partial pod template (``spec.template``) into a pod gpumix rendered.

The rules, in the order a reader meets the fields (README "Serving a gated model"):

- labels: added; gpumix's keep their values (the schema refuses ``gpumix.io/`` keys, which select
  the pods). Annotations: added; the user's win (e.g. to turn Prometheus scraping off).
- node selector: added; a key the pool sets keeps the pool's value (:func:`template_conflicts`
  names it). Tolerations, volumes, image pull secrets: added after gpumix's.
- service account, priority class: the user's (gpumix sets none). Affinity: the user's, with
  gpumix's preferred pod affinity terms added after the user's (they pack pods of one replica size
  onto the same nodes: `gpumix.render.deployment.packing_affinity`).
- the first container (vLLM's): env added after gpumix's, a name both set is the user's; envFrom
  and volume mounts added; CPU, memory and other resources the user's, ``nvidia.com/gpu`` gpumix's
  (the schema refuses it in the template). Name, image, args and port are not in the template.
"""

from typing import Any

from gpumix.api import GPUPool, PodTemplate
from gpumix.api.podtemplate import ContainerPatch


def _dump(items: list[Any]) -> list[dict[str, Any]]:
    return [i.model_dump(by_alias=True, exclude_none=True, mode="json") for i in items]


def _container(ours: dict[str, Any], patch: ContainerPatch) -> dict[str, Any]:
    out = dict(ours)
    user_env = _dump(patch.env)
    names = {e["name"] for e in user_env}
    env = [e for e in ours.get("env", []) if e["name"] not in names] + user_env
    added = {
        "env": env,
        "envFrom": ours.get("envFrom", []) + _dump(patch.env_from),
        "volumeMounts": ours.get("volumeMounts", []) + _dump(patch.volume_mounts),
    }
    out.update({k: v for k, v in added.items() if v})
    resources = ours.get("resources", {})
    for kind in ("requests", "limits"):
        merged = {**getattr(patch.resources, kind), **resources.get(kind, {})}
        if merged:
            resources = {**resources, kind: dict(sorted(merged.items()))}
    if resources:
        out["resources"] = resources
    return out


def _affinity(ours: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    """The user's affinity plus our preferred pod affinity terms (a user's term and ours weigh
    as their weights say; the scheduler adds them up)."""
    if not user:
        return ours
    key = "preferredDuringSchedulingIgnoredDuringExecution"
    theirs = user.get("podAffinity") or {}
    preferred = list(theirs.get(key) or [])
    preferred += [t for t in ours.get("podAffinity", {}).get(key, []) if t not in preferred]
    return {**user, "podAffinity": {**theirs, key: preferred}}


def apply_template(pod: dict[str, Any], template: PodTemplate | None) -> dict[str, Any]:
    """``pod`` (a pod template: ``metadata`` and ``spec``, the main container first) with
    ``template`` merged in by the rules above; a new dict, ``pod`` is left as it was."""
    if template is None:
        return pod
    meta, spec, user = pod["metadata"], pod["spec"], template.spec
    merged_meta = {
        **meta,
        "labels": dict(sorted({**template.metadata.labels, **meta.get("labels", {})}.items())),
    }
    annotations = {**meta.get("annotations", {}), **template.metadata.annotations}
    if annotations:
        merged_meta["annotations"] = dict(sorted(annotations.items()))
    ours_tolerations = spec.get("tolerations", [])
    added: dict[str, Any] = {
        "nodeSelector": dict(
            sorted({**user.node_selector, **spec.get("nodeSelector", {})}.items())
        ),
        "tolerations": ours_tolerations
        + [t for t in _dump(user.tolerations) if t not in ours_tolerations],
        "volumes": spec.get("volumes", []) + _dump(user.volumes),
        "imagePullSecrets": _dump(user.image_pull_secrets),
        "serviceAccountName": user.service_account_name,
        "priorityClassName": user.priority_class_name,
        "affinity": _affinity(spec.get("affinity", {}), user.affinity),
    }
    merged_spec = {
        **spec,
        **{k: v for k, v in added.items() if v},
        "containers": [
            _container(spec["containers"][0], template.container),
            *spec["containers"][1:],
        ],
    }
    return {"metadata": merged_meta, "spec": merged_spec}


def template_conflicts(template: PodTemplate | None, pool: GPUPool) -> list[str]:
    """Node selector keys of the template that ``pool`` sets to another value (the pool's is
    used: its nodes are the GPUs the plan bought), each naming the field."""
    if template is None:
        return []
    pool_selector = pool.spec.node_selector
    return [
        f"spec.template.spec.nodeSelector[{key}]={value!r}: GPUPool {pool.name} selects "
        f"{key}={pool_selector[key]!r}, which is used"
        for key, value in sorted(template.spec.node_selector.items())
        if key in pool_selector and pool_selector[key] != value
    ]
