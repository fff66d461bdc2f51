"""gpuaware.sim: trace loaders, workload construction, the placement evaluator and its reports."""

from gpuaware.sim.evaluator import ARRIVED, FRAG_AT, REPORT_AT, RunResult, discretize, evaluate, run_one
from gpuaware.sim.online import OnlineResult, inflate_trace, peak_demand, plot_online, run_online
from gpuaware.sim.report import (
    expected_means,
    load_expected,
    plot_alloc,
    summarize,
    write_assignments,
    write_per_seed,
    write_summary,
)
from gpuaware.sim.synthetic import synthetic_nodes, synthetic_pods
from gpuaware.sim.traces import (
    TraceError,
    TracePod,
    load_nodes,
    load_pods,
    shared_data_dir,
    write_nodes,
    write_pods,
)
from gpuaware.sim.workload import Workload, build_workload

__all__ = [
    "ARRIVED",
    "FRAG_AT",
    "REPORT_AT",
    "OnlineResult",
    "RunResult",
    "TraceError",
    "TracePod",
    "Workload",
    "build_workload",
    "discretize",
    "evaluate",
    "expected_means",
    "inflate_trace",
    "load_expected",
    "load_nodes",
    "load_pods",
    "peak_demand",
    "plot_alloc",
    "plot_online",
    "run_one",
    "run_online",
    "shared_data_dir",
    "summarize",
    "synthetic_nodes",
    "synthetic_pods",
    "write_assignments",
    "write_nodes",
    "write_per_seed",
    "write_pods",
    "write_summary",
]
