"""CustomResourceDefinitions generated from the pydantic models (the single source of truth).

pydantic emits JSON Schema 2020-12; a CRD needs a *structural* OpenAPI v3 schema. The rewrite:
inline `$ref`/`$defs`; drop `title`, `additionalProperties: false` (the apiserver prunes unknown
fields instead), `examples` and `deprecated`; `const` becomes a one-value `enum`; a numeric
`exclusiveMinimum` (`exclusiveMaximum`) becomes `minimum` (`maximum`) plus the boolean flag of
OpenAPI v3.0. `X | None` becomes plain optional `X` rather than `nullable`: the apiserver then
prunes an explicit null instead of storing it, so a CEL rule guarded by `has()` never meets a
null (deliberately unlike style.md's `nullable`).
"""

from pathlib import Path
from typing import Any

import yaml

from gpumix.api.base import GROUP, VERSION, Resource, name_rule

_DROP = {"title", "examples", "deprecated"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _resolve(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return structural_node({**target, **_resolve(extra, defs)})
    return structural_node({k: _resolve(v, defs) for k, v in node.items() if k != "$defs"})


def structural_node(node: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in node.items() if k not in _DROP}
    if isinstance(out.get("description"), str):
        out["description"] = " ".join(out["description"].split())
    if out.get("additionalProperties") is False or out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)  # pruned, or kept as written: no schema for them
    if "const" in out:
        out["enum"] = [out.pop("const")]
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        value = out.get(flag)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[bound] = out.pop(flag)
            out[flag] = True
    if "anyOf" in out:
        branches = [b for b in out["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1 and len(out["anyOf"]) == 2:
            del out["anyOf"]
            out = {**branches[0], **out}
            if out.get("default", 0) is None:
                del out["default"]
    return out


def openapi_schema(resource: type[Resource]) -> dict[str, Any]:
    """The openAPIV3Schema of one resource: apiVersion/kind/metadata plus spec (and status)."""
    raw = resource.model_json_schema(by_alias=True, mode="validation")
    schema = _resolve(raw, raw.get("$defs", {}))
    props = schema["properties"]
    out: dict[str, Any] = {
        "type": "object",
        "description": schema["description"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": props["spec"],
        },
        "required": ["spec"],
    }
    if "status" in props:
        out["properties"]["status"] = _without_defaults(props["status"])
    if resource.max_name_length is not None:
        out["x-kubernetes-validations"] = [name_rule(resource.max_name_length)]
    return out


def _without_defaults(node: Any) -> Any:
    """Status is written only by the operator: defaults there would only mask missing data."""
    if isinstance(node, list):
        return [_without_defaults(v) for v in node]
    if isinstance(node, dict):
        return {k: _without_defaults(v) for k, v in node.items() if k != "default"}
    return node


def crd(resource: type[Resource]) -> dict[str, Any]:
    kind = resource.kind_name
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(resource)},
        "additionalPrinterColumns": [dict(c) for c in resource.printer_columns],
    }
    if "status" in resource.model_fields:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": resource.plural,
                "singular": kind.lower(),
                "shortNames": list(resource.short_names),
                "categories": ["gpumix"],
            },
            "scope": resource.scope,
            "versions": [version],
        },
    }


def kustomization_of(resources: list[str]) -> dict[str, Any]:
    """A kustomize Kustomization listing `resources` (file names beside it)."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    }


def render_crds(resources: tuple[type[Resource], ...]) -> dict[str, str]:
    """File name → YAML text for every CRD plus the kustomization that lists them."""
    header = "# Generated by `gpumix crds` from gpumix.api; do not edit.\n"
    files = {
        f"{r.plural}.{GROUP}.yaml": header
        + yaml.safe_dump(crd(r), sort_keys=False, width=100, allow_unicode=True)
        for r in resources
    }
    kustomization = kustomization_of(sorted(files))
    # Named `Kustomization` (no extension, which kustomize accepts) so that `kubectl apply -f
    # crds/` skips it: both `apply -f crds/` and `apply -k crds/` then work.
    files["Kustomization"] = header + yaml.safe_dump(kustomization, sort_keys=False)
    return files


def write_crds(directory: Path, resources: tuple[type[Resource], ...]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_crds(resources).items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
