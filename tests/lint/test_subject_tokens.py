"""Every subject and JetStream consumer name built from a name goes through the contract's rule
(``subject_token`` / ``bus.Channel.at`` / ``consumer_name``): a scan of the schemas, libraries and
services finds no other construction, and it does find each kind when one is planted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from subject_scan import REPO, scan, scan_source, scanned_files

PLANTED_SUBJECTS = {
    "f-string with a constant": 'bus.Channel(f"{GPU_SAMPLED}.{cluster}.{node}", GpuSampled)',
    "f-string with a literal": 'await nc.publish(f"telemetry.gpu.sampled.v1.{msg.cluster}.{msg.node}", data)',
    "join": 'subject = ".".join([GPU_ROLLED_UP, settings.cluster])',
    "plus": 'subject = GPU_SCORED + "." + node',
    "format": 'subject = "{}.{}".format(ALERT_RAISED, ev.cluster)',
    "percent": 'subject = "%s.%s" % (DRAIN_RECOMMENDED, gpu_uuid)',
    "a filter": 'await js.subscribe(f"{ch.subject}.{cluster}.>")',
}
PLANTED_CONSUMER_NAMES = {
    "durable argument": 'await bus.subscribe_durable(js, ch, f"placement-{cluster}", handle)',
    "durable keyword": 'ConsumerSpec(durable="recorder-" + settings.cluster)',
    "durable variable": 'durable = "telemetry-agent-" + "-".join(sorted(nodes))',
    "durable helper": 'def recorder_durable(cluster: str) -> str:\n    return f"recorder-{cluster}"',
    "environment": 'env = {"GPUAWARE_BINDER_DURABLE": f"binder-{spec.cluster}"}',
    "a default": 'def durable(self) -> str:\n    return self.pending_durable or f"placement-{self.cluster}"',
    "the module's own consumer function": ('def _grant(stream: str, durable: str) -> str:\n    return durable\n'
                                           '_grant("BINDER", f"binder-{cluster}")'),
}
ALLOWED = {
    "the channel's rule": "await bus.publish(js, SAMPLED.at(msg.cluster, msg.node), msg)",
    "a filter by the rule": "ch = bus.event_channel(GpuSampled).under(settings.cluster)",
    "a token": 'subject = f"{GPU_SAMPLED}.{subject_token(cluster)}.{node_token}"',
    "a subject's wildcard": 'subs.append(c.subject + ".>")',
    "a subject under a prefix": 'return f"{DEAD_LETTER_PREFIX}.{subject}"',
    "the JetStream API": 'return f"{JS_API}.CONSUMER.INFO.{stream.name}.{durable}"',
    "a log line": 'log.info(f"published {GPU_SAMPLED} for {node}")',
    "a message id": 'msg_id = f"hc/{cluster}/{gpu}/{at:.6f}"',
    "a consumer name by the rule": 'durable = consumer_name(TELEMETRY_AGENT, *sorted(nodes))',
    "a configured consumer name": 'await bus.subscribe_durable(js, ch, checkpoint_durable(settings.durable), h)',
    "a version number": 'cc = f"{major}.{minor or 0}"',
}


def test_no_subject_or_consumer_name_is_built_from_a_name_without_the_rule() -> None:
    offences = scan(scanned_files())
    assert not offences, "\n".join(map(str, offences))


def test_the_scan_reads_every_library_and_service_module() -> None:
    files = {p.relative_to(REPO).as_posix() for p in scanned_files()}
    for pattern in ("libs/*/src/**/*.py", "services/*/src/**/*.py", "schemas/src/**/*.py"):
        every = {p.relative_to(REPO).as_posix() for p in REPO.glob(pattern)}
        assert every - files <= {"schemas/src/gpuaware/schemas/subjects.py"}, pattern


@pytest.mark.parametrize("source", [*PLANTED_SUBJECTS.values(), *PLANTED_CONSUMER_NAMES.values()],
                         ids=[*PLANTED_SUBJECTS, *PLANTED_CONSUMER_NAMES])
def test_a_planted_construction_is_found(source: str) -> None:
    offences = scan_source(source)
    assert len(offences) == 1, offences
    assert ("subject_token" if source in PLANTED_SUBJECTS.values() else "consumer_name") in offences[0].what


@pytest.mark.parametrize("source", ALLOWED.values(), ids=ALLOWED)
def test_what_the_rule_made_or_what_is_no_subject_passes(source: str) -> None:
    assert scan_source(source) == []


def test_a_planted_module_in_a_new_service_fails_the_scan(tmp_path: Path) -> None:
    module = tmp_path / "services" / "alert_bridge" / "src" / "gpuaware" / "services" / "alert_bridge" / "bridge.py"
    module.parent.mkdir(parents=True)
    module.write_text(textwrap.dedent("""\
        from gpuaware.schemas import ALERT_RAISED

        async def route(js, ev):
            await js.publish(f"{ALERT_RAISED}.{ev.cluster}", b"")
        """))
    assert [o.line for o in scan(scanned_files(tmp_path))] == [4]
    run = subprocess.run([sys.executable, str(Path(__file__).parent / "subject_scan.py"), str(module)],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "bridge.py:4: a subject built from ev.cluster" in run.stdout
