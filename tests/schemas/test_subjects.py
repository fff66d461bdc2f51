"""A name becomes exactly one subject token, whatever characters Kubernetes allowed in it."""

from __future__ import annotations

import pytest

from gpuaware.schemas import subject_matches, subject_token


@pytest.mark.parametrize("name, token", [
    ("gpu-node-1", "gpu-node-1"),
    ("ip-10-0-1-7.ec2.internal", "ip-10-0-1-7_ec2_internal"),
    ("a b*c>d", "a_b_c_d"),
    ("", "_"),
])
def test_subject_token(name: str, token: str) -> None:
    assert subject_token(name) == token


def test_a_dotted_node_name_is_one_token_under_a_wildcard() -> None:
    subject = f"telemetry.gpu.sampled.v1.{subject_token('prod.eu')}.{subject_token('n1.example.com')}"
    assert subject_matches("telemetry.gpu.sampled.v1.*.*", subject)
