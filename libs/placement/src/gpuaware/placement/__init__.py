"""gpuaware.placement."""
