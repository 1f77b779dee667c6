"""Command-line values checked where they are parsed, so bad input is one line and exit 2.

argparse names the flag in front of each message (``argument --rate: must be > 0, got -5``);
`Parser` prints that line alone, without the usage block, because users read the first line.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import urllib.parse
from typing import NoReturn

from gpumix.api import LLMService
from gpumix.profiles.catalog import GPUType, UnknownGPUTypeError, gpu_type
from gpumix.profiles.hfconfig import ModelConfigError, model_shape_from_config
from gpumix.profiles.models import UnknownModelError, model_shape
from gpumix.profiles.shape import ModelShape

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``gpumix plan: error: argument …``."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def fail(prog: str, message: str) -> NoReturn:
    """Bad input found after parsing: the same one line and exit code as a bad flag."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {text}")
    return value


def fraction(text: str) -> float:
    """A share in (0, 1]: an attainment target."""
    value = _number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def unit_interval(text: str) -> float:
    """A value in [0, 1]: an amplitude."""
    value = _number(text, float)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """An integer ≥ 0: a random seed."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def tcp_port(text: str) -> int:
    """A TCP port; 0 lets the system choose."""
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 0-65535, got {value}")
    return value


def edges(text: str) -> list[int]:
    """Bucket edges: at least two positive integers, strictly increasing (``1,256,512``)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not comma-separated integers") from None
    if len(values) < 2:
        raise argparse.ArgumentTypeError(f"needs at least two edges, got {text!r}")
    if values[0] < 1:
        raise argparse.ArgumentTypeError(f"edges start at 1 or more, got {values[0]}")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise argparse.ArgumentTypeError(f"edges must increase strictly, got {text!r}")
    return values


def gpu_types(text: str) -> list[GPUType]:
    """Catalog GPU types, comma-separated (``l4,a10g``)."""
    try:
        return [gpu_type(name.strip()) for name in text.split(",")]
    except UnknownGPUTypeError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def pod_counts(text: str) -> list[tuple[GPUType, int]]:
    """Catalog GPU types with pod counts, comma-separated (``a10g=2,l4``: one l4 pod)."""
    out: list[tuple[GPUType, int]] = []
    for item in text.split(","):
        name, sep, count = item.partition("=")
        try:
            gpu = gpu_type(name.strip())
        except UnknownGPUTypeError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        try:
            pods = int(count) if sep else 1
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: {count!r} is not an integer") from None
        if pods < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: a pod count must be at least 1")
        if any(g == gpu for g, _ in out):
            raise argparse.ArgumentTypeError(f"{gpu.name} is given twice; give each type once")
        out.append((gpu, pods))
    return out


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` base URL with a host."""
    try:
        url = urllib.parse.urlsplit(text)
        url.port  # noqa: B018  (raises ValueError on a port out of range or not a number)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise argparse.ArgumentTypeError(f"expected http://HOST[:PORT], got {text!r}")
    return text


def positive_floats(text: str) -> list[float]:
    """One or more values > 0, comma-separated (``40,120``)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("needs at least one value")
    return [positive_float(p) for p in parts]


def model_config(text: str) -> tuple[str, ModelShape]:
    """``MODEL=FILE``: the shape of MODEL from its Hugging Face ``config.json`` at FILE."""
    model, sep, path = text.partition("=")
    if not sep or not model.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"expected MODEL=FILE (a config.json), got {text!r}")
    try:
        return model.strip(), model_shape_from_config(path.strip(), model.strip())
    except ModelConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def service_shapes(
    services: list[LLMService], given: list[tuple[str, ModelShape]] | None
) -> tuple[dict[str, ModelShape], list[str]]:
    """Each service's model shape (from ``--model-config``, else built in) by model name, and
    the models in ``services`` that have neither."""
    shapes = dict(given or [])
    unknown: list[str] = []
    for name in sorted({s.spec.model.name for s in services} - shapes.keys()):
        try:
            shapes[name] = model_shape(name)
        except UnknownModelError:
            unknown.append(name)
    return shapes, unknown


def unknown_model(model: str) -> str:
    """What `gpumix plan`/`simulate` say of a model with no shape."""
    return (
        f"no built-in shape for model {model!r}: give its Hugging Face config.json with "
        f"--model-config {model}=FILE"
    )
