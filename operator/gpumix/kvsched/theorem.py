"""MELL Theorem 1 (§VII): the properties an allocation keeps, as a checker for tests and reports.

1. an M-GPU processes two M-requests (possibly one T-request besides);
2. an S-GPU processes three S-requests;
3. a T-GPU's memory usage is at least 75%;
4. an L-GPU j processes no S/M-request only if no S/M-request of an S/M-GPU fits in j;
5. T-GPUs exist only if every L/M-GPU's memory usage is at least 75%.

The theorem allows "a constant number of exceptions" (the most recently activated GPUs): callers
compare the number of violating pods with a bound.
"""

from __future__ import annotations

from gpumix.kvsched.mell import Mell
from gpumix.kvsched.state import RequestClass, sm_like

L, M, S, T = RequestClass.L, RequestClass.M, RequestClass.S, RequestClass.T


def violations(m: Mell) -> list[tuple[int, int]]:
    """(pod, property number) for every pod that breaks a property of Theorem 1."""
    cap = m.cap
    out: list[tuple[int, int]] = []
    labels = {pid: m.label(pid) for pid in m.c.pods}
    sm_sizes = [
        s
        for pid, p in m.c.pods.items()
        if labels[pid] in (S, M)
        for r, s in p.reqs.items()
        if sm_like(m.cls[r])
    ]
    t_pods = any(lab == T for lab in labels.values())
    for pid, pod in m.c.pods.items():
        lab = labels[pid]
        n = {c: sum(m.cls[r] == c for r in pod.reqs) for c in RequestClass}
        if lab == M and n[M] != 2:
            out.append((pid, 1))
        if lab == S and n[S] != 3:
            out.append((pid, 2))
        if lab == T and 4 * pod.used < 3 * cap:
            out.append((pid, 3))
        if lab == L and not m.has_sm(pid) and any(m.big(pid) + s <= cap for s in sm_sizes):
            out.append((pid, 4))
        if t_pods and lab in (L, M) and 4 * pod.used < 3 * cap:
            out.append((pid, 5))
    return out
