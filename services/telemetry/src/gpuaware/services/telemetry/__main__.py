"""Entry point only: ``python -m gpuaware.services.telemetry agent|collector``."""

from __future__ import annotations

import asyncio
import sys

from gpuaware.runtime import run_service
from gpuaware.services.telemetry import __version__
from gpuaware.services.telemetry.agent import mount_agent
from gpuaware.services.telemetry.handlers import mount_collector
from gpuaware.services.telemetry.settings import AgentSettings, CollectorSettings

USAGE = "usage: python -m gpuaware.services.telemetry agent|collector"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("agent", "collector"):
        print(USAGE, file=sys.stderr)
        return 2
    if args[0] == "agent":
        asyncio.run(run_service(AgentSettings.from_env(), version=__version__, mount=mount_agent))
    else:
        asyncio.run(run_service(CollectorSettings.from_env(), version=__version__, mount=mount_collector))
    return 0


if __name__ == "__main__":
    sys.exit(main())
