"""Entry point only: ``python -m gpuaware.services.placement``."""

from __future__ import annotations

import asyncio

from gpuaware.runtime import run_service
from gpuaware.services.placement import __version__
from gpuaware.services.placement.handlers import mounter
from gpuaware.services.placement.settings import PlacementSettings


def main() -> None:
    asyncio.run(run_service(PlacementSettings.from_env(), version=__version__, mount=mounter()))


if __name__ == "__main__":
    main()
