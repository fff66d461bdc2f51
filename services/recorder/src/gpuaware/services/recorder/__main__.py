"""Entry point only: ``python -m gpuaware.services.recorder``."""

from __future__ import annotations

import asyncio

from gpuaware.runtime import run_service
from gpuaware.services.recorder import __version__
from gpuaware.services.recorder.handlers import mount
from gpuaware.services.recorder.settings import RecorderSettings


def main() -> None:
    asyncio.run(run_service(RecorderSettings.from_env(), version=__version__, mount=mount))


if __name__ == "__main__":
    main()
