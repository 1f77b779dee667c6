"""What is in flight on each pod, as the router sees it.

The router knows every request it sent and every token that came back, so it knows each pod's
load without asking the engine: requests, and tokens held in KV cache (prompt + generated).
Pod choice reads it, and so does the KV-cache scheduler (the router's ``/admin/inflight``),
instead of an engine endpoint.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass
class Flight:
    pod: str
    prompt: int
    predicted_output: float
    generated: int = 0
    pool: str = ""
    max_tokens: int | None = None

    @property
    def tokens(self) -> int:
        """KV footprint in tokens: prompt plus what was generated so far."""
        return self.prompt + self.generated


class Ledger:
    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}
        self._tokens: defaultdict[str, int] = defaultdict(int)
        self._requests: defaultdict[str, int] = defaultdict(int)

    def __len__(self) -> int:
        return len(self._flights)

    def add(self, rid: str, flight: Flight) -> None:
        if rid in self._flights:
            raise ValueError(f"request {rid!r} is already in flight")
        self._flights[rid] = flight
        self._tokens[flight.pod] += flight.tokens
        self._requests[flight.pod] += 1

    def progress(self, rid: str, generated: int) -> None:
        """``generated`` tokens have come back for ``rid`` so far (ignored if unknown)."""
        flight = self._flights.get(rid)
        if flight is not None and generated != flight.generated:
            self._tokens[flight.pod] += generated - flight.generated
            flight.generated = generated

    def remove(self, rid: str) -> Flight | None:
        flight = self._flights.pop(rid, None)
        if flight is not None:
            self._tokens[flight.pod] -= flight.tokens
            self._requests[flight.pod] -= 1
        return flight

    def move(self, rid: str, pod: str, pool: str) -> None:
        """``rid`` now runs on ``pod`` (a migration): its whole footprint moves with it."""
        flight = self._flights[rid]
        self._tokens[flight.pod] -= flight.tokens
        self._requests[flight.pod] -= 1
        flight.pod, flight.pool = pod, pool
        self._tokens[pod] += flight.tokens
        self._requests[pod] += 1

    def get(self, rid: str) -> Flight | None:
        return self._flights.get(rid)

    def tokens(self, pod: str) -> int:
        return self._tokens.get(pod, 0)

    def requests(self, pod: str) -> int:
        return self._requests.get(pod, 0)

    def items(self) -> list[tuple[str, Flight]]:
        return list(self._flights.items())

    def per_pod(self) -> dict[tuple[str, str], int]:
        """Requests in flight per (pool, pod)."""
        out: defaultdict[tuple[str, str], int] = defaultdict(int)
        for flight in self._flights.values():
            out[flight.pool, flight.pod] += 1
        return dict(out)

    def on(self, pod: str) -> dict[str, Flight]:
        return {rid: f for rid, f in self._flights.items() if f.pod == pod}
