"""gpumix: serve LLMs on the cheapest mix of GPU types that meets each service's latency SLO."""

__version__ = "0.1.0"
