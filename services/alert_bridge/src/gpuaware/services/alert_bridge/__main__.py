"""Entry point only: ``python -m gpuaware.services.alert_bridge``."""

from __future__ import annotations

import asyncio
import sys

from gpuaware.runtime import SettingsError, run_service
from gpuaware.services.alert_bridge import __version__
from gpuaware.services.alert_bridge.handlers import mount
from gpuaware.services.alert_bridge.settings import AlertBridgeSettings


def main() -> None:
    try:
        settings = AlertBridgeSettings.from_env()
    except SettingsError as exc:
        sys.exit(f"alert-bridge: {exc}")
    asyncio.run(run_service(settings, version=__version__, mount=mount))


if __name__ == "__main__":
    main()
