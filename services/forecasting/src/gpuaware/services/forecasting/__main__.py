"""Entry point only: ``python -m gpuaware.services.forecasting``."""

from __future__ import annotations

import asyncio

from gpuaware.runtime import run_service
from gpuaware.services.forecasting import __version__
from gpuaware.services.forecasting.handlers import mount
from gpuaware.services.forecasting.settings import ForecastingSettings


def main() -> None:
    asyncio.run(run_service(ForecastingSettings.from_env(), version=__version__, mount=mount))


if __name__ == "__main__":
    main()
