"""Input validation: bad instances fail with a pydantic error naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpumix.plan import AllocationInstance, GPUOption

TPUT = [[5.0, 1.0], [10.0, 5.0]]


def gpu(
    name: str = "a10g", cost: float = 1.01, tput: list[list[float]] | None = None
) -> dict[str, object]:
    return {"name": name, "cost_per_hour": cost, "max_tput": tput or TPUT}


def make(**overrides: object) -> AllocationInstance:
    data: dict[str, object] = {"rates": [[1.0, 2.0], [0.0, 1.0]], "gpus": [gpu()]}
    data.update(overrides)
    return AllocationInstance.model_validate(data)


def test_valid_instance_defaults() -> None:
    inst = make()
    assert inst.slice_factor == 8
    assert inst.shape == (2, 2)
    assert inst.buckets_with_traffic() == [(0, 0), (0, 1), (1, 1)]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"rates": [[1.0, -2.0], [0.0, 1.0]]}, "rates"),
        ({"rates": [[1.0, float("nan")], [0.0, 1.0]]}, "rates"),
        ({"rates": [[1.0, 2.0], [1.0]]}, "rates"),
        ({"rates": [[1.0], [1.0]]}, "max_tput"),
        ({"gpus": [gpu(cost=0.0)]}, "cost_per_hour"),
        ({"gpus": [gpu(cost=-1.0)]}, "cost_per_hour"),
        ({"gpus": [gpu(tput=[[1.0, -1.0], [1.0, 1.0]])]}, "max_tput"),
        ({"gpus": [gpu(tput=[[1.0, 1.0], [1.0]])]}, "max_tput"),
        ({"gpus": [gpu(), gpu(tput=[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], name="b")]}, "max_tput"),
        ({"gpus": [gpu(), gpu()]}, "gpus"),
        ({"gpus": []}, "gpus"),
        ({"slice_factor": 0}, "slice_factor"),
        ({"input_edges": [1, 100]}, "input_edges"),
        ({"output_edges": [1, 100, 50]}, "output_edges"),
    ],
)
def test_bad_input_names_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        make(**overrides)


def test_negative_max_count_rejected() -> None:
    with pytest.raises(ValidationError, match="max_count"):
        GPUOption(name="x", cost_per_hour=1.0, max_tput=TPUT, max_count=-1)


def test_slice_load_is_slice_rate_over_max_tput() -> None:
    # §5.4.1 example: rate 4, slice factor 8 -> slices of 0.5 req/s; MaxTput 10 -> load 0.05.
    inst = make(rates=[[4.0, 0.0], [0.0, 0.0]], slice_factor=8, gpus=[gpu(tput=[[10, 0], [1, 1]])])
    assert inst.slice_load(0, (0, 0)) == pytest.approx(0.05)
    assert inst.slice_load(0, (0, 1)) is None  # MaxTput 0: cannot serve


def test_bucket_label_uses_edges_when_given() -> None:
    inst = make(input_edges=[1, 1000, 2000], output_edges=[1, 250, 500])
    assert inst.bucket_label((1, 1)) == "input 1000–2000 / output 250–500 tokens"
    assert make().bucket_label((1, 0)) == "(1, 0)"


def test_gpu_index_unknown_name() -> None:
    with pytest.raises(ValueError, match="unknown GPU type 'h100'"):
        make().gpu_index("h100")
