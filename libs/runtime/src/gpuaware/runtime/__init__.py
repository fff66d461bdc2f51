"""gpuaware.runtime."""
