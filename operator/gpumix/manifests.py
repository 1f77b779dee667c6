"""Reading gpumix objects from YAML files, with errors that name the file, object and field."""

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import ValidationError
from yaml.reader import ReaderError

from gpumix.api import GPUPool, GPUPoolSpec, GPUProfile, LLMService, Resource

KINDS: dict[str, type[Resource]] = {r.kind_name: r for r in (LLMService, GPUPool, GPUProfile)}


class ManifestError(ValueError):
    """A document that is not a valid gpumix object; the message says where and what to fix."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(err: ValidationError) -> str:
    """Every problem on one line: `spec.workload.requestRate: Input should be >= 0; …`."""
    lines = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        lines.append(f"{_field_path(loc) or '(object)'}: {e['msg']}")
    return "; ".join(lines)


def parse_object(doc: dict[str, Any], where: str) -> Resource:
    kind = doc.get("kind")
    if kind not in KINDS:
        raise ManifestError(
            f"{where}: kind {kind!r} is not a gpumix kind ({', '.join(sorted(KINDS))})"
        )
    try:
        return KINDS[kind].model_validate(doc)
    except ValidationError as err:
        name = (doc.get("metadata") or {}).get("name", "?")
        raise ManifestError(f"{where}: {kind} {name!r} is invalid: {describe(err)}") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's message on one line: the problem and where (``line 2, column 1``), without the
    quoted source and caret lines it adds."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{err.problem}{where}" + (f" ({err.context})" if err.context else "")
    if isinstance(err, ReaderError):
        return f"{str(err).splitlines()[0]} (character {err.position})"
    return " ".join(str(err).split())


def load_objects(paths: Iterable[Path]) -> list[Resource]:
    """Every gpumix object in the given multi-document YAML files, in file order."""
    objects: list[Resource] = []
    seen: dict[tuple[str, str, str], str] = {}
    for path in paths:
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except OSError as err:
            raise ManifestError(f"{path}: cannot read YAML: {err}") from None
        except yaml.YAMLError as err:
            raise ManifestError(f"{path}: cannot read YAML: {_yaml_problem(err)}") from None
        for index, doc in enumerate(docs):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ManifestError(f"{path} (document {index + 1}): not a YAML mapping")
            where = f"{path} (document {index + 1})"
            obj = parse_object(doc, where)
            key = (obj.kind_name, obj.metadata.get("namespace", "default"), obj.name)
            if key in seen:
                raise ManifestError(
                    f"{where}: {key[0]} {key[1]}/{key[2]} is already given in {seen[key]}; "
                    "give each object once"
                )
            seen[key] = where
            objects.append(obj)
    return objects


class Inputs(NamedTuple):
    services: list[LLMService]
    profiles: list[GPUProfile]
    pools: list[GPUPool]


def load_inputs(paths: Iterable[Path]) -> Inputs:
    """LLMServices, GPUProfiles and GPUPools from files, as `gpumix plan`/`simulate` take them:
    without GPUPools, one uncapped pool per profiled GPU type."""
    objects = load_objects(paths)
    profiles = [o for o in objects if isinstance(o, GPUProfile)]
    return Inputs(
        services=[o for o in objects if isinstance(o, LLMService)],
        profiles=profiles,
        pools=[o for o in objects if isinstance(o, GPUPool)] or default_pools(profiles),
    )


def default_pools(profiles: list[GPUProfile]) -> list[GPUPool]:
    """Without GPUPools in the input, every GPU type that has a profile is one uncapped pool."""
    types = sorted({p.spec.gpu_type for p in profiles})
    return [
        GPUPool(
            metadata={"name": t},
            spec=GPUPoolSpec(gpu_type=t, node_selector={"gpumix.io/gpu-class": t}),
        )
        for t in types
    ]
