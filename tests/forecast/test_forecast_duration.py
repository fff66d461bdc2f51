"""Job duration prediction: fingerprints, convergence on recurring jobs, a conservative default for novel ones."""

from __future__ import annotations

import pytest
from forecast_helpers import shared_data

from gpuaware.forecast.duration import DurationPredictor, evaluate_philly, fingerprint


def test_run_specific_tokens_do_not_split_a_fingerprint() -> None:
    a = fingerprint("train-resnet50-run17-2017-10-03", "team-a", "reg/img:1@sha256:ab", 8)
    b = fingerprint("Train-ResNet50-run18-2017-10-04", "team-a", "reg/img:1@sha256:cd", 8)
    assert a == b
    assert a != fingerprint("train-resnet50-run17", "team-a", "reg/img:1", 4)  # other resources, other job


def test_recurring_estimate_starts_halfway_and_converges() -> None:
    p = DurationPredictor(prior_weight=1.0, novel_quantile=0.75)
    other = fingerprint("other", "t", "", 1)
    for _ in range(4):
        p.observe(other, 100.0)  # the tenant's prior: log 100
    job = fingerprint("job", "t", "", 1)
    s, how = p.predict(job)
    assert how == "novel: tenant p75" and s == pytest.approx(100.0)
    p.observe(job, 10_000.0)
    s, how = p.predict(job)
    # (log 1e4 + log 1e2) / 2 = log 1e3: halfway between the run and the prior, in log space
    assert how == "recurring (1 runs)" and s == pytest.approx(1000.0)
    for _ in range(99):
        p.observe(job, 10_000.0)
    # 100 runs of 1e4 s: the estimate is the job's own runtime (the tenant's p75 moved there too)
    assert p.predict(job) == (pytest.approx(1e4), "recurring (100 runs)")


def test_novel_jobs_get_a_high_quantile_and_nothing_known_gets_the_default() -> None:
    p = DurationPredictor(novel_quantile=0.75, default_s=3600.0)
    assert p.predict(fingerprint("x", "new", "", 1)) == (3600.0, "default")
    for d in (10.0, 100.0, 1000.0, 10_000.0, 100_000.0):
        p.observe(fingerprint(f"j{d}", "busy", "", 1), d)
    s, how = p.predict(fingerprint("never-seen", "busy", "", 2))
    assert how == "novel: tenant p75" and s == pytest.approx(10_000.0)
    assert p.predict(fingerprint("x", "new-tenant", "", 1))[1] == "novel: cluster p75"
    p.observe(fingerprint("bad", "busy", "", 1), float("nan"))  # ignored, not an exception
    p.observe(fingerprint("bad", "busy", "", 1), -5.0)
    assert fingerprint("bad", "busy", "", 1) not in p.by_fp or p.by_fp[fingerprint("bad", "busy", "", 1)][0] == 0


@pytest.mark.slow
def test_philly_jobs_recurring_error_beats_the_tenant_mean() -> None:
    src = shared_data() / "pollux" / "traces" / "philly.csv"
    if not src.is_file():
        pytest.skip(f"{src} not found (set GPUAWARE_SHARED_DATA to the shared/data folder)")
    got = evaluate_philly(src)
    assert got["recurring_test_jobs"] > 10_000
    assert got["median_abs_error_s"]["ours_recurring"] < got["median_abs_error_s"]["tenant_mean_recurring"]
