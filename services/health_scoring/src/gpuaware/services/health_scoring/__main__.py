"""Entry point only: ``python -m gpuaware.services.health_scoring``."""

from __future__ import annotations

import asyncio

from gpuaware.runtime import run_service
from gpuaware.services.health_scoring import __version__
from gpuaware.services.health_scoring.handlers import mount
from gpuaware.services.health_scoring.settings import HealthScoringSettings


def main() -> None:
    asyncio.run(run_service(HealthScoringSettings.from_env(), version=__version__, mount=mount))


if __name__ == "__main__":
    main()
