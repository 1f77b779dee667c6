"""The running operator: kopf watches feed an in-memory view; one planner loop acts on it.

Everything that decides lives in `gpumix.reconcile` (pure); this package only does I/O.
"""
