"""gpuaware.cli."""
