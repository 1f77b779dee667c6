"""Request routing by the plan: the pure core shared by the simulator and the proxy."""

from gpumix.route.core import Decision, PoolFullError, RoutingCore
from gpumix.route.ledger import Flight, Ledger
from gpumix.route.predict import OutputPredictor, histogram_prior
from gpumix.route.split import BucketSplit
from gpumix.route.table import PoolRoute, RoutingTable

__all__ = [
    "BucketSplit",
    "Decision",
    "Flight",
    "Ledger",
    "OutputPredictor",
    "PoolFullError",
    "PoolRoute",
    "RoutingCore",
    "RoutingTable",
    "histogram_prior",
]
