"""gpuaware.sim."""
