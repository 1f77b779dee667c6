"""Cut the public traces and profiles gpumix reads down to what it reads, into operator/gpumix/data.

Run once from upstream copies (`python hack/cut_data.py --source DIR`, where DIR holds
`traces/` and `profiles/` laid out as the README of operator/gpumix/data says); it checks each
upstream file's sha256, keeps only the rows and columns gpumix reads (values as upstream wrote
them, never re-formatted) and writes the result. Nothing here runs in tests or at run time: it is
how the shipped files were made, so anyone can check them against their sources.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from gpumix.profiles.calibration import VIDUR_OPS

OUT = Path(__file__).resolve().parents[1] / "operator" / "gpumix" / "data"

UPSTREAM_SHA256 = {
    "traces/AzureLLMInferenceTrace_code.csv": (
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"
    ),
    "traces/AzureLLMInferenceTrace_conv.csv": (
        "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"
    ),
    "traces/conversation_trace.jsonl": (
        "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
    ),
    "traces/synthetic_trace.jsonl": (
        "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131"
    ),
    "traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv": (
        "9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc"
    ),
}

Row = dict[str, str]


def _check(source: Path, rel: str) -> Path:
    path = source / rel
    want = UPSTREAM_SHA256.get(rel)
    if want is not None and hashlib.sha256(path.read_bytes()).hexdigest() != want:
        raise SystemExit(f"{path}: sha256 differs from the upstream file this cut was made from")
    return path


def _copy(source: Path, rel: str) -> None:
    out = OUT / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_check(source, rel), out)


def _csv(source: Path, rel: str, keep: Callable[[Row], bool], columns: list[str]) -> None:
    with _check(source, rel).open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if keep(r)]
    out = OUT / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _jsonl_without_hashes(source: Path, rel: str) -> None:
    """Mooncake rows without `hash_ids` (prefix-block hashes gpumix does not read: 75% of bytes)."""
    fields = ("timestamp", "input_length", "output_length")
    lines = _check(source, rel).read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    out = OUT / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({k: r[k] for k in fields}) + "\n" for r in rows))


def cut(source: Path) -> None:
    for name in ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"):
        _copy(source, f"traces/{name}")
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        _jsonl_without_hashes(source, f"traces/{name}")
    _csv(
        source,
        "traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        lambda r: True,
        ["num_prefill_tokens", "num_decode_tokens"],
    )
    for model in ("llama1_30b", "llama2_70b"):
        for gpu in ("a100", "l4", "l4x2"):
            for phase in ("prompt", "decode"):
                _copy(source, f"profiles/helix/{model}/{gpu}/{phase}_bs2time.csv")
    for gpu in ("a100", "a40", "h100"):
        _csv(
            source,
            f"profiles/vidur/compute/{gpu}/meta-llama/Llama-2-7b-hf/mlp.csv",
            lambda r: r["num_tensor_parallel_workers"] == "1",
            [
                "num_tokens",
                "num_tensor_parallel_workers",
                *(f"time_stats.{op}.median" for op in VIDUR_OPS),
            ],
        )
    for topology in ("a100_dgx", "a100_pairwise_nvlink", "a40_pairwise_nvlink"):
        _csv(
            source,
            f"profiles/vidur/network/{topology}/send_recv.csv",
            lambda r: r["num_workers"] == "2",
            ["size", "num_workers", "devices_per_node", "time_stats.send_recv.median"],
        )
    _csv(
        source,
        "profiles/splitwise-sim/perf_model.csv",
        lambda r: (
            r["model"] == "llama2-70b"
            and r["tensor_parallel"] in ("2", "4", "8")
            and r["hardware"] in ("a100-80gb", "h100-80gb")
        ),
        [
            "model",
            "hardware",
            "prompt_size",
            "batch_size",
            "token_size",
            "prompt_time",
            "token_time",
            "tensor_parallel",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="holds traces/ and profiles/")
    cut(parser.parse_args().source)


if __name__ == "__main__":
    main()
