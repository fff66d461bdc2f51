"""A fault model for the simulated fleet, calibrated on real fault data: kinds, rates, durations, precursors.

Why in ``gpuaware.sim``: it serves the evaluation only (the health benchmark draws a plan, renders it
as telemetry and scores that); no service reads it, and health scoring must not see the ground truth
it is scored against: it reads what ``render`` makes of a plan, never the plan itself.

Three public data sets (``../shared/data/gpu-faults``, PROVENANCE.md there) calibrate it, parsed
here at run time (``calibrate`` takes their contents, ``load_calibration`` reads the files):

* **StepFun** (``fault_trace.json``: fault_start / fault_end per server over ~349 days, 400
  servers): the *kinds* of hard GPU failure and their mix (the GPU class: DBE above threshold,
  unknown device error, PCIe link width low, XID error, nvidia-smi timeout, GPU lost, temperature
  high, other), the *rate* (GPU-class faults per server-day / 8 GPUs -> per GPU-hour), the
  *durations* (fault_end - fault_start, per kind), *recurrence* (an earlier GPU-class fault on the
  same server before a failure: the share and the real gaps) and fan faults (class ``Fan``: the
  cooling failures that heat a node's GPUs, rate and durations).
* **Titan** (``gc_full.csv``): GPU-hours per DBE / off-the-bus removal, an independent check of the
  rate (the plan uses StepFun's; both are reported).
* **Calchas** (``hbm_errors_public.csv``): what comes before an uncorrectable memory error. Every
  real UE episode (an uncorrectable error after >= 24 h without one on that server) with its
  server's preceding history (corrected errors and earlier uncorrectable episodes, hour by hour,
  within ``Assumptions.lookback_days``) is kept; a simulated DBE failure *replays one of them,
  chosen at random*, ending at the failure. Bursts of corrected errors not followed by an
  uncorrectable one within 7 days are the real corrected-error noise of healthy GPUs.

What the data do not say is an ``Assumptions`` field, each with its reason: how each StepFun
description shows in telemetry (``SIGNATURES``), the shape and share of the precursors no data set
records (XID bursts before GPU-lost / XID / device errors, PCIe replay growth before a link
downgrade, the thermal drift before a temperature fault), the rate of application XIDs and PCIe
replay bursts, how much a fan fault heats a node. The benchmark writes the calibration and the
assumptions next to its figures.

The real rates give about one hard failure in 1,000 GPUs x 7 days, so ``draw_plan`` multiplies
every rate taken from StepFun by ``scale`` (the benchmark reports it): detection lead and false
quarantines do not depend on the rate, only how many cases there are to count.

Modules: ``data`` (the three files' parsers), ``calibration`` (the numbers and the assumptions),
``plan`` (the ground truth and each GPU's effects), ``render`` (the effects as telemetry).
Pure functions of their inputs and a seed: ``calibrate(...)`` -> ``Calibration``;
``draw_plan(calibration, layout, ...)`` -> ``FaultPlan`` (the ground truth: failures, transients, the
effects per GPU); ``render(effects, ...)`` -> per-minute telemetry arrays of one GPU (cumulative ECC
and PCIe counters, temperatures, XIDs, telemetry presence) over a base temperature the caller
brings (the ``SimulatedFleet``'s, for the benchmark).
"""

from gpuaware.sim.fleet_faults.calibration import (
    CALCHAS_FILE,
    STEPFUN_FILE,
    TITAN_FILE,
    Assumptions,
    Calibration,
    calibrate,
    load_calibration,
)
from gpuaware.sim.fleet_faults.data import (
    SIGNATURES,
    STEPFUN_KINDS,
    FaultKind,
    HbmHistory,
    parse_calchas,
    parse_stepfun,
    parse_titan,
)
from gpuaware.sim.fleet_faults.plan import (
    Effects,
    Failure,
    FaultPlan,
    Heat,
    Outage,
    Point,
    Replays,
    Transient,
    draw_plan,
)
from gpuaware.sim.fleet_faults.render import Rendered, render

__all__ = [
    "CALCHAS_FILE",
    "SIGNATURES",
    "STEPFUN_FILE",
    "STEPFUN_KINDS",
    "TITAN_FILE",
    "Assumptions",
    "Calibration",
    "Effects",
    "Failure",
    "FaultKind",
    "FaultPlan",
    "HbmHistory",
    "Heat",
    "Outage",
    "Point",
    "Rendered",
    "Replays",
    "Transient",
    "calibrate",
    "draw_plan",
    "load_calibration",
    "parse_calchas",
    "parse_stepfun",
    "parse_titan",
    "render",
]
