"""Pure decisions of the operator: pool capacity, per-service plans, rollout order, status.

Nothing here talks to Kubernetes; `gpumix.operator` feeds snapshots in and writes results out.
"""
