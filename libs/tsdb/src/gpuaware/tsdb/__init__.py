"""gpuaware.tsdb."""
