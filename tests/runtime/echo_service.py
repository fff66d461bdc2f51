"""A tiny service built on gpuaware.runtime, run as a real process by test_service_runtime.py.

It answers `echotest.echo` (request/reply) and consumes `echotest.note.v1` durably, republishing
each note on `echotest.noted.v1` so the test can see it was handled.
"""

import asyncio
from typing import ClassVar

import msgspec

from gpuaware import bus
from gpuaware.runtime import ServiceContext, ServiceSettings, Supervisor, run_service
from gpuaware.schemas.streams import DEADLETTER, StreamSpec


class EchoSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_ECHO_"
    service_name: str = "echo"
    handle_delay_s: float = 0.0
    doomed_loop: bool = False
    """start a supervised loop that always raises (the service must exit non-zero)"""


class Note(msgspec.Struct, frozen=True):
    text: str


NOTES = bus.Channel("echotest.note.v1", Note)
NOTED = bus.Channel("echotest.noted.v1", Note)
STREAMS = (StreamSpec(name="ECHOTEST", subjects=("echotest.note.v1",)), DEADLETTER)


async def mount(ctx: ServiceContext) -> list[bus.Endpoint]:
    settings: EchoSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for

    async def on_note(note: Note, _delivery: bus.Delivery) -> None:
        await asyncio.sleep(settings.handle_delay_s)
        await bus.publish_core(ctx.nc, NOTED, note)

    async def echo(note: Note) -> Note:
        return Note(text=note.text.upper())

    async def doomed() -> None:
        raise RuntimeError("injected: this loop always fails")

    ctx.on_stop(await bus.subscribe_durable(ctx.js, NOTES, "echo", on_note, ack_wait=5, poll=0.2))
    if settings.doomed_loop:
        ctx.supervise("echo doomed loop", doomed)
    return [bus.Endpoint(name="echo", subject="echotest.echo", request_type=Note, handler=echo)]


if __name__ == "__main__":
    asyncio.run(run_service(EchoSettings.from_env(), version="0.0.1", mount=mount, streams=STREAMS,
                            supervisor=Supervisor(base_delay_s=0.01, max_delay_s=0.05, max_failures=3)))
