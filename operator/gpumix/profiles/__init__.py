"""What a GPU type can do for a model: the GPU catalog, and MaxTput from profiles (Mélange §5.3)."""

from gpumix.profiles.catalog import CATALOG, GPUType, UnknownGPUTypeError, gpu_type
from gpumix.profiles.maxtput import (
    ProfileRangeError,
    max_rate_within,
    max_tput,
    max_tput_for_grid,
)

__all__ = [
    "CATALOG",
    "GPUType",
    "ProfileRangeError",
    "UnknownGPUTypeError",
    "gpu_type",
    "max_rate_within",
    "max_tput",
    "max_tput_for_grid",
]
