"""gpuaware.schemas."""
