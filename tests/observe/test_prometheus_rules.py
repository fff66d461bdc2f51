"""The alert rules (deploy/prometheus/rules.yaml) are valid Prometheus rules, each has a unit test that
fires and stays silent where it should (`promtool test rules`), and every series they read is one a
service serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "rules_test.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian's `prometheus` package; `make test` installs it "
                             "when it runs as root with apt-get)")


def _alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


@needs_promtool
def test_promtool_accepts_the_rules() -> None:
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in out.stdout, out.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    out = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120,
                         cwd=RULE_TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_unit_test_and_a_severity() -> None:
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    names = {a["alert"] for a in _alerts()}
    assert names == tested, f"untested: {sorted(names - tested)}; tests of unknown alerts: {sorted(tested - names)}"
    for a in _alerts():
        assert a["labels"]["severity"] in ("critical", "warning", "info"), a["alert"]
        assert a["annotations"]["summary"] and a["annotations"]["description"], a["alert"]


def test_every_series_the_rules_read_is_served_by_a_service() -> None:
    served = "\n".join(p.read_text() for root in ("services", "libs") for p in (REPO / root).rglob("*.py"))
    for a in _alerts():
        for name in set(re.findall(r"\bgpuaware_[a-z_]+", a["expr"])):
            base = re.sub(r"_(total|bucket|count|sum)$", "", name)
            assert f'"{base}"' in served, f"{a['alert']} reads {name}, which no service serves"
