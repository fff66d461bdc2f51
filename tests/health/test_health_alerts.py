"""Alert decisions: raised once per condition (fingerprint), resolved when it clears, never twice."""

from __future__ import annotations

from health_helpers import GPU, HOUR, NODE, book, no_risk, obs

from gpuaware.health import AlertBook, HealthConfig
from gpuaware.schemas import Severity, fingerprint

LABELS = {"cluster": "default", "node": NODE, "gpu": GPU}


def rules(decision) -> tuple[list[str], list[str]]:
    return sorted(a.rule for a in decision.raised), sorted(a.rule for a in decision.resolved)


def test_quarantine_raises_once_then_steps_down_and_resolves() -> None:
    b = no_risk()
    alerts = AlertBook(source="health/0")
    assert not alerts.decide(b.observe(obs(0.0, ecc_uncorrected_aggregate=0)), emitted_at=0.0)
    d = alerts.decide(b.observe(obs(HOUR, ecc_uncorrected_aggregate=1)), emitted_at=HOUR)
    assert rules(d) == (["gpu_quarantined"], [])
    raised = d.raised[0]
    assert raised.fingerprint == fingerprint("gpu_quarantined", LABELS)
    assert raised.severity is Severity.CRITICAL and raised.started_at == HOUR and raised.gpu_uuid == GPU
    assert "ecc_uncorrected" in raised.summary
    # the condition holds for a day: nothing more is published (de-duplicated)
    for h in range(2, 25):
        assert not alerts.decide(b.observe(obs(h * HOUR, ecc_uncorrected_aggregate=1)), emitted_at=h * HOUR)
    # hour 25: clean day -> degraded: the quarantine alert resolves, a degraded one is raised
    d = alerts.decide(b.observe(obs(25 * HOUR, ecc_uncorrected_aggregate=1)), emitted_at=25 * HOUR)
    assert rules(d) == (["gpu_degraded"], ["gpu_quarantined"])
    resolved = d.resolved[0]
    assert (resolved.fingerprint, resolved.started_at, resolved.resolved_at) == (raised.fingerprint, HOUR, 25 * HOUR)
    # hour 49: healthy -> the degraded alert resolves; nothing stays active
    for h in range(26, 49):
        alerts.decide(b.observe(obs(h * HOUR, ecc_uncorrected_aggregate=1)), emitted_at=h * HOUR)
    d = alerts.decide(b.observe(obs(49 * HOUR, ecc_uncorrected_aggregate=1)), emitted_at=49 * HOUR)
    assert rules(d) == ([], ["gpu_degraded"]) and alerts.active == {}


def test_failure_risk_and_critical_xid() -> None:
    # XID 79 with the default risk: quarantined, the XID alert and the risk alert all start together;
    # the XID stops being current after its one-hour hold while quarantine and risk go on
    b = book()
    alerts = AlertBook(source="health/0", config=HealthConfig())
    alerts.decide(b.observe(obs(0.0)), emitted_at=0.0)
    d = alerts.decide(b.observe(obs(60.0, xids=(79,))), emitted_at=60.0)
    assert rules(d) == (["gpu_failure_risk", "gpu_quarantined", "gpu_xid_critical"], [])
    xid = next(a for a in d.raised if a.rule == "gpu_xid_critical")
    assert "79" in xid.summary and "REBOOT_NODE" in xid.summary
    risk = next(a for a in d.raised if a.rule == "gpu_failure_risk")
    assert risk.value is not None and risk.value > 0.5 and risk.threshold == 0.05
    d = alerts.decide(b.observe(obs(60.0 + HOUR + 1)), emitted_at=60.0 + HOUR + 1)
    assert rules(d) == ([], ["gpu_xid_critical"])


def test_stale_telemetry_raises_and_the_next_sample_resolves() -> None:
    b = no_risk()
    alerts = AlertBook(source="health/0")
    alerts.decide(b.observe(obs(0.0)), emitted_at=0.0)
    (stale,) = b.tick(400.0)
    assert rules(alerts.decide(stale, emitted_at=400.0)) == (["gpu_telemetry_stale"], [])
    (again,) = b.tick(500.0)
    assert not alerts.decide(again, emitted_at=500.0)
    assert rules(alerts.decide(b.observe(obs(560.0)), emitted_at=560.0)) == ([], ["gpu_telemetry_stale"])


def test_cordon_is_an_info_alert() -> None:
    b = no_risk()
    alerts = AlertBook(source="health/0")
    alerts.decide(b.observe(obs(0.0)), emitted_at=0.0)
    d = alerts.decide(b.cordon(GPU, reason="RMA 42", by="alice", at=10.0), emitted_at=10.0)
    assert rules(d) == (["gpu_cordoned", "gpu_quarantined"], [])
    assert next(a for a in d.raised if a.rule == "gpu_cordoned").severity is Severity.INFO
    d = alerts.decide(b.uncordon(GPU, reason="fixed", by="alice", at=20.0), emitted_at=20.0)
    assert rules(d) == ([], ["gpu_cordoned", "gpu_quarantined"])


def test_resend_keeps_the_fingerprint_and_the_start() -> None:
    b = no_risk()
    alerts = AlertBook(source="health/0", resend_after_s=3 * HOUR)
    alerts.decide(b.observe(obs(0.0, ecc_uncorrected_aggregate=0)), emitted_at=0.0)
    first = alerts.decide(b.observe(obs(HOUR, ecc_uncorrected_aggregate=1)), emitted_at=HOUR).raised[0]
    sent = [alerts.decide(b.observe(obs(h * HOUR, ecc_uncorrected_aggregate=1)), emitted_at=h * HOUR)
            for h in range(2, 8)]
    # sent again at hours 4 and 7 (3 h after the last send), identical condition
    again = [(h, d.raised[0]) for h, d in zip(range(2, 8), sent, strict=True) if d.raised]
    assert [h for h, _ in again] == [4, 7]
    assert all((a.fingerprint, a.started_at) == (first.fingerprint, first.started_at) for _, a in again)


def test_a_restarted_alert_book_neither_re_raises_nor_forgets() -> None:
    b = no_risk()
    alerts = AlertBook(source="health/0")
    alerts.decide(b.observe(obs(0.0, ecc_uncorrected_aggregate=0)), emitted_at=0.0)
    alerts.decide(b.observe(obs(HOUR, ecc_uncorrected_aggregate=1)), emitted_at=HOUR)
    restarted = AlertBook(source="health/1")
    restarted.load(alerts.dump())
    assert not restarted.decide(b.observe(obs(2 * HOUR, ecc_uncorrected_aggregate=1)), emitted_at=2 * HOUR)
    b.uncordon(GPU, reason="replaced", by="ops", at=3 * HOUR, clear=True)
    d = restarted.decide(b.observe(obs(3 * HOUR + 60, ecc_uncorrected_aggregate=1)), emitted_at=3 * HOUR + 60)
    assert rules(d) == ([], ["gpu_quarantined"])


def test_other_gpus_alerts_are_left_alone() -> None:
    b = no_risk()
    alerts = AlertBook(source="health/0")
    alerts.decide(b.observe(obs(0.0, gpu_uuid="GPU-b", xids=(79,))), emitted_at=0.0)
    assert len(alerts.active) == 2          # GPU-b: quarantined + XID
    d = alerts.decide(b.observe(obs(0.0)), emitted_at=0.0)   # GPU-aaaa, healthy
    assert not d and len(alerts.active) == 2
