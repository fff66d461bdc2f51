"""Bad input never flips a state and is counted: out-of-order, duplicated and missing samples, counter
resets after a driver reload, unknown XID codes; undecodable and schema-violating messages are
dead-lettered with the reason and the service keeps going."""

from __future__ import annotations

import asyncio

from health_scoring_helpers import T0, Recorder, gpu_uuid, health_scoring, row, stats

from gpuaware.schemas import DEAD_LETTER_STREAM, GPU_SAMPLED, HEADER_REASON, dead_letter_subject


async def test_bad_input_is_counted_and_explained_and_never_flips_a_state(recorder: Recorder, nats_proc, cluster: str,
                                                                         fresh_database_url: str) -> None:
    r = recorder
    g0, g1 = gpu_uuid("n1", 0), gpu_uuid("n1", 1)
    await r.nodes(["n1"])
    ecc = {"ecc_corrected_aggregate": 40, "ecc_corrected_volatile": 40}
    async with health_scoring(nats_proc.url, fresh_database_url, cluster) as svc:
        await r.sample("n1", T0, [row("n1", 0, **ecc), row("n1", 1)], seq=0)
        await r.sample("n1", T0 + 10, [row("n1", 0, **ecc), row("n1", 1)], seq=1)
        # late: older than what was applied (a delayed retry of the agent)
        await r.sample("n1", T0 + 5, [row("n1", 0, **ecc), row("n1", 1)], seq=2)
        # duplicated: the same tick stored twice under another message id
        await r.sample("n1", T0 + 10, [row("n1", 0, **ecc), row("n1", 1)], msg_id="again", seq=3)
        # the driver reloaded: every volatile and aggregate counter went back to 0 (and the XID gauge moved
        # to a code nobody documented)
        await r.sample("n1", T0 + 20, [row("n1", 0, xid_last=999), row("n1", 1)], seq=4)
        # 3 minutes of missing samples (10-s interval, 30-s heartbeat), and 3 batches lost on the way
        await r.sample("n1", T0 + 200, [row("n1", 0, xid_last=999), row("n1", 1)], seq=8)
        # garbage, and a sample whose column lengths disagree: dead letters, the consumer goes on
        subject = f"{GPU_SAMPLED}.{cluster}.n1"
        await r.js.publish(subject, b"not json")
        await r.js.publish(subject, b'{"kind": "telemetry.gpu.sampled.v1", "source": "a", "emitted_at": 1, '
                                    b'"node": "n1", "sampled_at": 1, "interval_s": 1, "gpu_uuid": ["G"], '
                                    b'"gpu_index": [0, 1]}')
        await r.sample("n1", T0 + 210, [row("n1", 0, xid_last=999), row("n1", 1)], seq=9)
        await r.wait(lambda: svc.view.book.tracks[g0].last_at == T0 + 210, what="the last sample")
        s = await stats(r.nc)
        assert s.dead_lettered == 2 and s.decode_errors == 2
        await asyncio.sleep(0.3)
    assert r.states_of(g0) == ["healthy"] and r.states_of(g1) == ["healthy"]  # never flipped
    assert s.issues == {"out_of_order": 2, "duplicate": 2, "counter_reset": 2, "unknown_xid": 1, "gap": 2}, s.issues
    assert s.counts["refused"] == 4  # the late and the duplicated batch, two GPUs each
    assert s.counts["lost_batches"] == 3  # seq 5, 6 and 7 never came
    i = s.inputs
    assert (i["out_of_order"], i["duplicates"], i["counter_resets"], i["unknown_xids"], i["gaps"]) == (2, 2, 2, 1, 2)
    assert i["unknown_xid_codes"] == {"999": 1} and i["missing_s"] == 2 * (180 - 30)  # T0+20 -> T0+200 where a heartbeat (30 s) was due
    # each one explained on the GPU's track (what happened, what was done)
    kinds = [issue.kind.value for issue in svc.view.book.tracks[g0].issues]
    assert kinds == ["out_of_order", "duplicate", "counter_reset", "counter_reset", "unknown_xid", "gap"]
    assert "re-baselined" in svc.view.book.tracks[g0].issues[2].detail
    # the unknown XID is scored a little and named, never more
    last = [x for x in r.scored if x.gpu_uuid == g0][-1]
    assert "xid_unknown_999" in last.reasons and last.state.value == "healthy"
    dead = await r.js.get_last_msg(DEAD_LETTER_STREAM, dead_letter_subject(f"{GPU_SAMPLED}.{cluster}.n1"))
    assert "decode error" in dead.headers[HEADER_REASON]
