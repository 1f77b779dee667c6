"""A simulated request: its size, and what happened to it (times in seconds of simulated time)."""

from __future__ import annotations


class Request:
    """One request. Plain slots (the simulator makes millions of attribute accesses)."""

    __slots__ = (
        "admitted",
        "arrival",
        "blocks",
        "done_prefill",
        "drop_reason",
        "finish",
        "first_token",
        "generated",
        "kv_load",
        "output",
        "pod",
        "preemptions",
        "prefill_load",
        "prompt",
        "queue_at_arrival",
        "rid",
        "running_at_arrival",
        "todo",
    )

    def __init__(self, rid: int, arrival: float, prompt: int, output: int) -> None:
        if prompt < 1 or output < 1:
            raise ValueError(f"request {rid}: prompt and output must be >= 1 token")
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.pod = -1
        self.generated = 0
        """Output tokens produced so far (the client has received them)."""
        self.todo = 0
        """Tokens still to prefill before the next token comes out (prompt + generated after a
        recompute preemption); 0 while decoding."""
        self.done_prefill = 0
        """Tokens of the current prefill already computed (chunked prefill)."""
        self.blocks = 0
        """KV blocks held."""
        self.admitted: float | None = None
        self.first_token: float | None = None
        self.finish: float | None = None
        self.preemptions = 0
        self.drop_reason: str | None = None
        self.queue_at_arrival = 0
        self.running_at_arrival = 0
        self.kv_load = 0.0
        """∫ pod KV usage dt over the request's time on the pod (divide by latency: mean usage)."""
        self.prefill_load = 0.0
        """Seconds of prefill steps its pod ran while the request was on it."""

    @property
    def latency(self) -> float:
        assert self.finish is not None
        return self.finish - self.arrival

    @property
    def ttft(self) -> float:
        assert self.first_token is not None
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        """Mélange §4.1: request latency ÷ output tokens."""
        return self.latency / self.output

    @property
    def itl(self) -> float:
        """Mean inter-token latency after the first token (vLLM's ITL); 0 for one token."""
        assert self.finish is not None and self.first_token is not None
        return (self.finish - self.first_token) / (self.output - 1) if self.output > 1 else 0.0

    @property
    def mean_kv_load(self) -> float:
        """Time-averaged KV usage (0–1) of the pod while this request was on it."""
        return self.kv_load / self.latency if self.finish is not None and self.latency > 0 else 0.0

    def __repr__(self) -> str:
        return f"Request({self.rid}, t={self.arrival:.3f}, {self.prompt}→{self.output})"


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size) if tokens > 0 else 0
