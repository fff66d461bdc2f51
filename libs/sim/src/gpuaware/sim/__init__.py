"""gpuaware.sim: trace loaders, workload construction, the placement evaluator and its reports, and
the evaluations of health scoring: ``hbm`` (the Calchas file replayed, behind ``gpuaware health
evaluate``), ``health_fleet`` (a simulated fleet's streams against its ground truth) and
``fleet_faults`` (the fault model that draws that ground truth)."""

from gpuaware.sim.evaluator import ARRIVED, FRAG_AT, REPORT_AT, RunResult, discretize, evaluate, run_one
from gpuaware.sim.hbm import (
    HbmEvaluation,
    HbmEvent,
    HbmFormatError,
    evaluate_hbm,
    parse_hbm_csv,
    replay_all,
    score_replays,
    ue_episodes,
)
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
    "HbmEvaluation",
    "HbmEvent",
    "HbmFormatError",
    "OnlineResult",
    "RunResult",
    "TraceError",
    "TracePod",
    "Workload",
    "build_workload",
    "discretize",
    "evaluate",
    "evaluate_hbm",
    "expected_means",
    "inflate_trace",
    "load_expected",
    "load_nodes",
    "load_pods",
    "parse_hbm_csv",
    "peak_demand",
    "plot_alloc",
    "plot_online",
    "replay_all",
    "run_one",
    "run_online",
    "score_replays",
    "shared_data_dir",
    "summarize",
    "synthetic_nodes",
    "synthetic_pods",
    "ue_episodes",
    "write_assignments",
    "write_nodes",
    "write_per_seed",
    "write_pods",
    "write_summary",
]
