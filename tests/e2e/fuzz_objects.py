"""Hypothesis strategies for raw gpumix API objects, used by test_fuzz_api.py.

Each strategy draws the body of one LLMService, GPUPool or GPUProfile as a client would send it,
at one of three levels: VALID (what the schema means), BORDERLINE (allowed by the schema but at
its edges: zero, denormal and huge rates, SLOs, prices and shares; names of up to 253
characters, starting with a digit or holding dots; non-ASCII model names, arguments and
annotations; references to pools, profiles, ConfigMaps and services that do not exist) and
INVALID (anything: wrong types, NaN and infinities as numbers and as strings, negative values,
histograms of the wrong shape, all zero or of 10,000 cells, edges that do not increase, upper
case and unicode names, unknown fields, minReplicas > maxReplicas, missing required fields).
Names are templates (``{i}`` is replaced by a number unique in the run) so that no two objects
collide.

Fuzzed profiles describe only the ``fuzz/`` models: the sample profiles of Llama-2-7B stay the
only ones of that model, so the test's sentinel service is planned from the same numbers
throughout. Fuzzed pools hold at most 16 GPUs, so that no plan asks KWOK for thousands of pods.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

API_VERSION = "gpumix.io/v1alpha1"
RUN_LABEL = "fuzz.gpumix.io/run"
LEVELS = ("valid", "borderline", "invalid")

LLAMA = "meta-llama/Llama-2-7b-hf"
LLAMA_INPUT_EDGES = [1, 256, 512, 1024, 2048, 3072]
LLAMA_OUTPUT_EDGES = [1, 64, 128, 256, 512, 1001]
FUZZ_MODELS = ("fuzz/model-a", "fuzz/mödel-ü")
SAMPLE_POOLS = ("l4", "a10g", "a100-80gb", "h100")
GPU_TYPES = ("l4", "a10g", "a100-80gb", "h100", "fuzz-gpu")

Draw = Any
"""Hypothesis's ``draw`` inside ``st.composite``."""
UNSET: Any = object()
"""A field left out of the object."""

# ---- scalars ----------------------------------------------------------------------------------

NOT_A_NUMBER: st.SearchStrategy[Any] = st.sampled_from(
    ["NaN", "nan", "Infinity", "-Infinity", "inf", "1e400", "", "5 req/s", "0x10", None, True,
     [], {}, [1.0], float("nan"), float("inf"), float("-inf")]
)  # fmt: skip
"""What a number field must not hold (``float('nan')`` is sent as the JSON token NaN)."""

TINY = [5e-324, 2.2250738585072014e-308, 1e-300, 1e-9]
HUGE = [1e6, 1e9, 1e15, 1e100, 1e300, 1.7976931348623157e308]
NEGATIVE = [-1.0, -1e-300, -1e308, -0.5]
HUGE_INTS = [2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30]

PLAIN_STRINGS = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8)
ODD_STRINGS: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(
        ["ü", "名前", "💥", "tab\there", "line\nbreak", "NaN", "null", "../../etc/passwd",
         "x" * 300, "é" * 80, "\u202eevil", "{{ .Values }}", "$(HOME)", "a\u0000b", " "]
    ),
    st.text(min_size=1, max_size=12),
)  # fmt: skip
"""Strings a free-text field may hold (the apiserver takes any UTF-8)."""
WEIRD_STRINGS = st.one_of(ODD_STRINGS, st.just(""))


def pick(draw: Draw, level: int, sane: Any, edge: Any = None, bad: Any = None) -> Any:
    """A sane value at VALID; sane or edge at BORDERLINE; any of the three at INVALID."""
    choices = [sane] + ([edge] if edge is not None and level >= 1 else [])
    choices += [bad] if bad is not None and level >= 2 else []
    return draw(st.one_of(*choices))


def floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def number(draw: Draw, level: int, sane: st.SearchStrategy[Any], *, zero_ok: bool = True) -> Any:
    """A number field: extremes within the schema at BORDERLINE, anything at INVALID."""
    edge = st.sampled_from(([0.0] if zero_ok else []) + TINY + HUGE)
    bad = st.one_of(
        st.sampled_from(NEGATIVE + ([] if zero_ok else [0.0])),
        NOT_A_NUMBER,
        st.sampled_from([-(2**70), 2**70]),
    )
    return pick(draw, level, sane, edge, bad)


def maybe(draw: Draw, value: st.SearchStrategy[Any] | Any, p_unset: float = 0.5) -> Any:
    """``value`` drawn (or taken as is), or, with probability ``p_unset``, UNSET."""
    if draw(st.integers(0, 9)) < round(10 * p_unset):
        return UNSET
    return draw(value) if isinstance(value, st.SearchStrategy) else value


def put(obj: dict[str, Any], key: str, value: Any) -> None:
    if value is not UNSET:
        obj[key] = value


# ---- names ------------------------------------------------------------------------------------

SANE_NAMES = st.just("fz-{i}")
EDGE_NAMES = st.one_of(
    st.integers(40, 245).map(lambda n: "fz-{i}-" + "x" * n),
    st.sampled_from(["{i}-fz", "fz-{i}.dotted.name", "{i}.{i}", "fz-{i}-" + "a" * 50]),
)
"""Valid object names (DNS-1123 subdomains) that are not valid Service or label values."""
BAD_NAMES = st.one_of(
    st.integers(250, 400).map(lambda n: "fz-{i}-" + "x" * n),
    st.sampled_from(["fz-{i}-ünï", "FZ-{i}", "fz-{i}-", "fz_{i}", "fz-{i}-名前", "fz-{i}..x",
                     "-fz-{i}", "fz-{i}-💥", "fz {i}"]),
)  # fmt: skip
SANE_LABEL_KEYS = st.sampled_from(["team", "example.com/team", "app.kubernetes.io/part-of"])
BAD_LABEL_KEYS = st.one_of(
    st.sampled_from(["a/b/c", "ü", "x" * 64, "-bad", "gpumix.io/pool", "nvidia.com/gpu"]),
    WEIRD_STRINGS,
)
SANE_LABEL_VALUES = st.sampled_from(["x", "", "research", "v1.2_3"])
BAD_LABEL_VALUES = st.one_of(st.just("v" * 64), ODD_STRINGS)


@st.composite
def metadata(draw: Draw, level: int, run: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": pick(draw, level, SANE_NAMES, EDGE_NAMES, BAD_NAMES),
        "labels": {RUN_LABEL: run},
    }
    if draw(st.integers(0, 4)) == 0:
        key = pick(draw, level, SANE_LABEL_KEYS, None, BAD_LABEL_KEYS)
        meta["labels"][key] = pick(draw, level, SANE_LABEL_VALUES, None, BAD_LABEL_VALUES)
    if draw(st.integers(0, 4)) == 0:
        key = pick(draw, level, SANE_LABEL_KEYS, None, BAD_LABEL_KEYS)
        meta["annotations"] = {key: pick(draw, level, PLAIN_STRINGS, ODD_STRINGS)}
    return meta


# ---- buckets ----------------------------------------------------------------------------------


@st.composite
def edges(draw: Draw, level: int) -> Any:
    """Token edges: strictly increasing ints; at INVALID often broken."""
    n = draw(st.integers(2, 7)) if level < 1 or draw(st.booleans()) else draw(
        st.sampled_from([2, 33] + ([0, 1, 34, 100] if level >= 2 else [])))  # fmt: skip
    steps = draw(st.lists(st.integers(1, 2048), min_size=n, max_size=n))
    first = draw(st.sampled_from([0, 1, 1, 16]))
    out: list[Any] = [first + sum(steps[:k]) for k in range(n)]
    if level == 1 and out and draw(st.booleans()):
        out[-1] = draw(st.sampled_from([2**31, 2**53, 2**63 - 1]))
    flaw = draw(st.integers(0, 9)) if level == 2 else -1
    if out and flaw == 0:
        out = out[::-1]  # decreasing
    elif len(out) > 2 and flaw == 1:
        out[1] = out[0]  # repeated
    elif out and flaw == 2:
        out[0] = -1
    elif out and flaw == 3:
        out[-1] = draw(st.sampled_from([2**63, 10**30, out[-1] + 0.5]))
    elif out and flaw == 4:
        out[-1] = draw(NOT_A_NUMBER)
    elif flaw == 5:
        return draw(st.sampled_from(["1,2,3", None, {"a": 1}, [[1, 2]], 7]))
    return out


def _cells(draw: Draw, level: int, rows: int, cols: int) -> list[list[Any]]:
    """A rows x cols matrix of non-negative shares, at least one positive."""
    mode = draw(st.integers(0, 9)) if level >= 1 else 0
    if mode <= 4:  # ordinary shares (one draw per row: few choices even for a big matrix)
        matrix = [
            draw(st.lists(floats(0, 5000), min_size=cols, max_size=cols)) for _ in range(rows)
        ]
        matrix[draw(st.integers(0, rows - 1))][draw(st.integers(0, cols - 1))] = 1.0
        return matrix
    value = draw(st.sampled_from(TINY + HUGE))
    if mode == 5:  # one extreme non-zero cell
        matrix = [[0.0] * cols for _ in range(rows)]
        matrix[draw(st.integers(0, rows - 1))][draw(st.integers(0, cols - 1))] = value
        return matrix
    if mode == 6:  # every cell extreme (the sum may overflow to inf)
        return [[value] * cols for _ in range(rows)]
    if mode == 7:  # extreme next to ordinary
        matrix = [[1.0] * cols for _ in range(rows)]
        matrix[0][0] = value
        return matrix
    if mode == 8:  # integers of any size
        return [
            [draw(st.sampled_from([1, 10**6, 2**53 + 1, 2**63 - 1]))] * cols for _ in range(rows)
        ]
    return [[5e-324] * cols for _ in range(rows)]  # denormal shares only


@st.composite
def histogram(draw: Draw, level: int, ins: Any, outs: Any) -> Any:
    """A matrix for these edges: matching at VALID and BORDERLINE, often wrong at INVALID."""
    rows = len(ins) - 1 if isinstance(ins, list) and len(ins) > 1 else 2
    cols = len(outs) - 1 if isinstance(outs, list) and len(outs) > 1 else 2
    flaw = draw(st.integers(0, 9)) if level == 2 else -1
    if flaw == 0:
        rows += draw(st.sampled_from([-1, 1]))
    elif flaw == 1:
        cols += draw(st.sampled_from([-1, 1]))
    elif flaw == 2:
        rows, cols = 100, 100  # 10,000 cells
    rows, cols = max(rows, 0), max(cols, 0)
    if rows == 0 or cols == 0:
        return [[] for _ in range(rows)]
    matrix = _cells(draw, level, rows, cols)
    if flaw == 3:
        return [[0.0] * cols for _ in range(rows)]
    if flaw == 4:
        matrix[0][0] = -draw(st.sampled_from([1.0, 1e-300, 1e300]))
    elif flaw == 5:
        matrix[-1][-1] = draw(NOT_A_NUMBER)
    elif flaw == 6 and rows > 1:
        matrix[1] = matrix[1][:-1]  # ragged
    elif flaw == 7:
        return draw(st.sampled_from([[], [1, 2, 3], "[[1]]", None, [[[1.0]]], {"0": [1.0]}]))
    return matrix


# ---- LLMService -------------------------------------------------------------------------------


@st.composite
def workload(draw: Draw, level: int) -> dict[str, Any]:
    if draw(st.integers(0, 2)) > 0:  # the sample profiles' grid: plannable on them
        ins, outs = list(LLAMA_INPUT_EDGES), list(LLAMA_OUTPUT_EDGES)
    else:
        ins, outs = draw(edges(level)), draw(edges(level))
    w: dict[str, Any] = {
        "requestRate": number(draw, level, floats(0, 20)),
        "inputEdges": ins,
        "outputEdges": outs,
        "histogram": draw(histogram(level, ins, outs)),
    }
    put(w, "overProvision", maybe(draw, number(draw, level, floats(0, 10))))
    slices = pick(draw, level, st.integers(1, 64), st.sampled_from([1, 64]),
                  st.one_of(st.sampled_from([0, 65, -1, *HUGE_INTS]), NOT_A_NUMBER))  # fmt: skip
    put(w, "sliceFactor", maybe(draw, slices))
    put(w, "source", maybe(draw, pick(draw, level, st.sampled_from(["Static", "Prometheus"]),
                                      None, st.sampled_from(["static", "", "ü"]))))  # fmt: skip
    if level == 2 and draw(st.integers(0, 9)) == 0:
        w[draw(st.sampled_from(["requestsPerSecond", "histogramm", "ü"]))] = 1
    return w


@st.composite
def template(draw: Draw, level: int) -> dict[str, Any]:
    """spec.template: labels, env, resources, node selector and volumes."""
    quantity = pick(
        draw,
        level,
        st.sampled_from(["4", "500m", "24Gi", 8]),
        st.just(0.5),
        st.one_of(WEIRD_STRINGS, st.sampled_from(["1e400", "1.5.5", "Gi", "NaN"])),
    )
    container: dict[str, Any] = {
        "name": pick(draw, level, st.just("vllm"), None, st.sampled_from(["sidecar", ""]))
    }
    kind = draw(st.integers(0, 3))
    if kind == 0:
        container["env"] = [{
            "name": pick(draw, level, st.sampled_from(["HF_TOKEN", "A_B"]), None, ODD_STRINGS),
            "value": pick(draw, level, PLAIN_STRINGS, WEIRD_STRINGS),
        }]  # fmt: skip
    elif kind == 1:
        resource = pick(draw, level, st.sampled_from(["cpu", "memory"]), None,
                        st.sampled_from(["nvidia.com/gpu", "ü", "bad name"]))  # fmt: skip
        container["resources"] = {
            draw(st.sampled_from(["requests", "limits"])): {resource: quantity}
        }
    elif kind == 2:
        container["volumeMounts"] = [{
            "name": pick(draw, level, st.just("data"), None, WEIRD_STRINGS),
            "mountPath": pick(draw, level, st.just("/data"), None, WEIRD_STRINGS),
        }]  # fmt: skip
    spec: dict[str, Any] = {"containers": [container]}
    if draw(st.booleans()):
        key = pick(draw, level, SANE_LABEL_KEYS, None, BAD_LABEL_KEYS)
        spec["nodeSelector"] = {key: pick(draw, level, SANE_LABEL_VALUES, None, BAD_LABEL_VALUES)}
    if kind == 2:
        name = container["volumeMounts"][0]["name"]
        spec["volumes"] = [{"name": pick(draw, level, st.just(name), None,
                                         st.sampled_from(["dshm", "model-cache", "ü"])),
                            "emptyDir": {}}]  # fmt: skip
    meta = {}
    if draw(st.booleans()):
        key = pick(draw, level, SANE_LABEL_KEYS, None, BAD_LABEL_KEYS)
        meta["labels"] = {key: pick(draw, level, SANE_LABEL_VALUES, None, BAD_LABEL_VALUES)}
    if draw(st.booleans()):
        key = pick(draw, level, SANE_LABEL_KEYS, None, BAD_LABEL_KEYS)
        meta["annotations"] = {key: pick(draw, level, PLAIN_STRINGS, WEIRD_STRINGS)}
    return {"metadata": meta, "spec": spec}


@st.composite
def llmservice(draw: Draw, run: str) -> dict[str, Any]:
    level = draw(st.sampled_from([0, 1, 1, 2, 2]))
    model: dict[str, Any] = {
        "name": pick(draw, level, st.sampled_from([LLAMA, LLAMA, LLAMA, *FUZZ_MODELS]),
                     st.one_of(st.just("example/no-such-model"), ODD_STRINGS), st.just(""))
    }  # fmt: skip
    put(model, "servedName", maybe(draw, pick(draw, level, PLAIN_STRINGS, ODD_STRINGS), 0.8))
    put(model, "args", maybe(draw, pick(draw, level, st.just(["--seed", "1"]),
                                        st.lists(WEIRD_STRINGS, max_size=3)), 0.8))  # fmt: skip
    put(model, "weightsGiB", maybe(draw, number(draw, level, floats(1, 200), zero_ok=False), 0.8))
    if level >= 1 and draw(st.integers(0, 9)) == 0:
        ref = pick(draw, level, st.just("missing-config"), None,
                   st.sampled_from(["Bad_Name", "x" * 254, ""]))  # fmt: skip
        model["config"] = {"configMapKeyRef": {"name": ref}}
    slo: dict[str, Any] = {"tpotMs": number(draw, level, floats(10, 500), zero_ok=False)}
    put(slo, "ttftMs", maybe(draw, number(draw, level, floats(50, 5000), zero_ok=False), 0.7))
    target = pick(draw, level, floats(0.5, 0.9999), st.sampled_from([0.5, 0.9999]),
                  st.sampled_from([0.0, 0.4999, 1.0, 1.5, -1.0, "0.99"]))  # fmt: skip
    put(slo, "attainmentTarget", maybe(draw, target, 0.7))
    spec: dict[str, Any] = {"model": model, "slo": slo, "workload": draw(workload(level))}
    if level == 2 and draw(st.integers(0, 9)) == 0:
        del spec[draw(st.sampled_from(["model", "slo", "workload"]))]
    pools = pick(draw, level, st.sampled_from([[], ["l4"], ["a10g", "h100"]]),
                 st.lists(st.sampled_from([*SAMPLE_POOLS, "ghost", "fz-1"]), max_size=3),
                 st.one_of(st.lists(WEIRD_STRINGS, max_size=2), st.just("l4")))  # fmt: skip
    put(spec, "pools", maybe(draw, pools))
    put(spec, "minReplicas", maybe(draw, pick(draw, level, st.integers(0, 2), st.integers(0, 8),
        st.one_of(st.sampled_from([-1, *HUGE_INTS]), NOT_A_NUMBER)), 0.7))  # fmt: skip
    most = pick(draw, level, st.integers(2, 6), st.sampled_from([0, 1]),
                st.sampled_from([-1, *HUGE_INTS]))  # fmt: skip
    put(spec, "maxReplicas", maybe(draw, most, 0.7))
    if level < 2 and spec.get("maxReplicas", 10**9) < spec.get("minReplicas", 0):
        del spec["maxReplicas"]
    put(spec, "priority", maybe(draw, pick(draw, level, st.just("Interactive"), st.just("Batch"),
                                           st.sampled_from(["batch", "High"])), 0.7))  # fmt: skip
    put(spec, "weight", maybe(draw, number(draw, level, floats(0.1, 1000), zero_ok=False), 0.7))
    budget = number(draw, level, floats(0, 100))
    put(spec, "budget", maybe(draw, {"maxCostPerHour": budget}, 0.8))
    churn = {"penalty": number(draw, level, floats(0, 100)),
             "tolerance": number(draw, level, floats(0, 0.9))}  # fmt: skip
    put(spec, "churn", maybe(draw, churn, 0.8))
    routing = {
        "mode": pick(draw, level, st.sampled_from(["Service", "Service", "Router"]),
                     st.just("InferencePool"), st.just("Mesh")),
        "replicas": pick(draw, level, st.integers(1, 2), None, st.sampled_from([0, *HUGE_INTS])),
    }  # fmt: skip
    put(spec, "routing", maybe(draw, routing, 0.1))
    if draw(st.integers(0, 5)) == 0:
        if level < 2:
            spec["priority"] = "Batch"
        batch: dict[str, Any] = {}
        put(batch, "deadlineSeconds", maybe(draw, pick(draw, level, st.integers(60, 604800),
            st.sampled_from([60, 604800]), st.sampled_from([0, 59, *HUGE_INTS]))))  # fmt: skip
        put(batch, "servedBy", maybe(draw, pick(draw, level, st.just("fz-1"),
            st.one_of(st.just("nobody"), ODD_STRINGS), st.just(""))))  # fmt: skip
        put(batch, "backlogRequests", maybe(draw, number(draw, level, floats(0, 1e6))))
        spec["batch"] = batch
    if draw(st.integers(0, 5)) == 0:
        spec["workload"] = {**spec.get("workload", {}), "source": "Prometheus"}
        forecast = {
            "enabled": draw(st.booleans()),
            "stepSeconds": pick(draw, level, st.integers(15, 3600), None, st.integers(1, 4000)),
            "seasonSeconds": pick(draw, level, st.integers(0, 86400), None, st.integers(0, 10**6)),
        }  # fmt: skip
        pacing = pick(draw, level, st.sampled_from(["Immediate", "Utilisation", "UtilisationGap"]),
                      None, st.just("Sometimes"))  # fmt: skip
        spec["scaling"] = {"forecast": forecast, "pacing": pacing}
    if draw(st.integers(0, 7)) == 0:
        via = "Engine" if level < 2 and routing["mode"] != "Router" else draw(
            st.sampled_from(["Router", "Engine"]))  # fmt: skip
        spec["kvMigration"] = {"enabled": True, "via": via}
    if draw(st.integers(0, 3)) == 0:
        spec["template"] = draw(template(level))
    if level == 2 and draw(st.integers(0, 9)) == 0:
        spec[draw(st.sampled_from(["replicas", "gpuType", "Pools"]))] = draw(WEIRD_STRINGS)
    return {"apiVersion": API_VERSION, "kind": "LLMService", "metadata": draw(metadata(level, run)),
            "spec": spec}  # fmt: skip


# ---- GPUPool ----------------------------------------------------------------------------------


@st.composite
def gpupool(draw: Draw, run: str) -> dict[str, Any]:
    level = draw(st.sampled_from([0, 1, 2, 2]))
    selector = pick(draw, level,
                    st.just({"fuzz.gpumix.io/class": "none"}),
                    st.sampled_from(SAMPLE_POOLS).map(lambda p: {"gpumix.io/gpu-class": p}),
                    st.one_of(st.dictionaries(BAD_LABEL_KEYS, BAD_LABEL_VALUES, max_size=2),
                              st.sampled_from([None, "l4", ["a"]])))  # fmt: skip
    spec: dict[str, Any] = {
        "gpuType": pick(draw, level, st.sampled_from(GPU_TYPES), ODD_STRINGS, st.just("")),
        "nodeSelector": selector,
    }
    put(spec, "pricePerGPUHour", maybe(draw, number(draw, level, floats(0.1, 20), zero_ok=False)))
    put(spec, "gpusPerNode", maybe(draw, pick(draw, level, st.sampled_from([1, 2, 4, 8]),
        st.sampled_from([3, 16, 1024]), st.one_of(st.sampled_from([0, -1, 1.5, "4"]),
                                                  NOT_A_NUMBER))))  # fmt: skip
    cap = pick(draw, level, st.integers(1, 16), st.just(0),
               st.sampled_from([-1, 1.5, "4", *HUGE_INTS]))  # fmt: skip
    put(spec, "maxGPUs", maybe(draw, cap))
    toleration = {
        "key": pick(draw, level, st.just("nvidia.com/gpu"), ODD_STRINGS),
        "operator": pick(draw, level, st.sampled_from(["Exists", "Equal"]), None, st.just("Maybe")),
        "effect": pick(draw, level, st.sampled_from(["NoSchedule", "NoExecute"]), None,
                       st.just("Sometimes")),
    }  # fmt: skip
    put(spec, "tolerations", maybe(draw, [toleration], 0.7))
    if level == 2 and draw(st.integers(0, 9)) == 0:
        spec[draw(st.sampled_from(["gpus", "price", "ü"]))] = 1
    if level == 2 and draw(st.integers(0, 9)) == 0:
        del spec[draw(st.sampled_from(["gpuType", "nodeSelector"]))]
    return {"apiVersion": API_VERSION, "kind": "GPUPool", "metadata": draw(metadata(level, run)),
            "spec": spec}  # fmt: skip


# ---- GPUProfile -------------------------------------------------------------------------------


@st.composite
def gpuprofile(draw: Draw, run: str) -> dict[str, Any]:
    level = draw(st.sampled_from([0, 1, 2, 2]))
    ins, outs = draw(edges(level)), draw(edges(level))
    spec: dict[str, Any] = {
        "model": pick(draw, level, st.sampled_from(FUZZ_MODELS), None, st.just("")),
        "gpuType": pick(draw, level, st.sampled_from(GPU_TYPES), ODD_STRINGS, st.just("")),
        "inputEdges": ins,
        "outputEdges": outs,
    }
    put(spec, "gpusPerReplica", maybe(draw, pick(draw, level, st.sampled_from([1, 2, 4, 8]), None,
                                                 st.sampled_from([3, 0, 16, "1"]))))  # fmt: skip
    form = pick(draw, level, st.sampled_from(["tables", "tables", "samples"]), None,
                st.sampled_from(["both", "neither"]))  # fmt: skip
    if form in ("tables", "both"):
        tables = []
        for _ in range(draw(st.integers(1, 3) if level < 2 else st.integers(0, 3))):
            tpot = number(draw, level, floats(10, 500), zero_ok=False)
            tables.append({"tpotMs": tpot, "maxTput": draw(histogram(level, ins, outs))})
        spec["tables"] = tables
    if form in ("samples", "both"):
        rows = len(ins) - 1 if isinstance(ins, list) and len(ins) > 1 else 1
        cols = len(outs) - 1 if isinstance(outs, list) and len(outs) > 1 else 1
        samples = []
        for _ in range(draw(st.integers(1, 4) if level < 2 else st.integers(0, 4))):
            points = [
                {"rate": number(draw, level, floats(0, 50)),
                 "tpotMs": number(draw, level, floats(1, 500))}
                for _ in range(draw(st.integers(1, 4) if level < 2 else st.integers(0, 4)))
            ]  # fmt: skip
            samples.append({
                "inputBucket": pick(draw, level, st.integers(0, rows - 1), None,
                                    st.sampled_from([-1, rows])),
                "outputBucket": pick(draw, level, st.integers(0, cols - 1), None,
                                     st.sampled_from([-1, cols])),
                "points": points,
            })  # fmt: skip
        spec["samples"] = samples
    put(spec, "source", maybe(draw, pick(draw, level, PLAIN_STRINGS, WEIRD_STRINGS)))
    return {"apiVersion": API_VERSION, "kind": "GPUProfile", "metadata": draw(metadata(level, run)),
            "spec": spec}  # fmt: skip


def any_object(run: str) -> st.SearchStrategy[dict[str, Any]]:
    """One object of any kind; services most often, since they are what the planner plans."""
    return st.one_of(llmservice(run), llmservice(run), llmservice(run), gpupool(run),
                     gpuprofile(run))  # fmt: skip
