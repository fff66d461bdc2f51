"""gpuaware.bus."""
