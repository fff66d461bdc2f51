"""Entry point only: ``python -m gpuaware.services.quota``."""

from __future__ import annotations

import asyncio

from gpuaware.runtime import run_service
from gpuaware.services.quota import __version__
from gpuaware.services.quota.handlers import mount
from gpuaware.services.quota.settings import QuotaSettings


def main() -> None:
    asyncio.run(run_service(QuotaSettings.from_env(), version=__version__, mount=mount))


if __name__ == "__main__":
    main()
