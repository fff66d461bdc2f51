"""`make lint`'s import contract fails when a service imports another service, and passes otherwise.

Fake services are added as extra `gpuaware` namespace portions in a temporary folder, so the real
tree is checked together with them exactly as `make lint` checks it.
"""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("import_layers.py")


def _portion(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _lint(extra: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--extra-path", str(extra)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("files", "broken"),
    [
        # two services that talk only through NATS subjects: every contract kept
        ({"gpuaware/services/alpha/__init__.py": "import gpuaware.schemas\n",
          "gpuaware/services/beta/__init__.py": "import gpuaware.schemas\n"}, None),
        # alpha imports beta directly: the independence contract breaks
        ({"gpuaware/services/alpha/__init__.py": "import gpuaware.services.beta\n",
          "gpuaware/services/beta/__init__.py": ""}, "services are independent of each other BROKEN"),
        # a service talking to NATS without gpuaware.bus: the boundary contract breaks
        ({"gpuaware/services/alpha/__init__.py": "import nats\n",
          "gpuaware/services/beta/__init__.py": ""}, "only gpuaware.bus imports nats BROKEN"),
        # a library reaching up into a service: the layering breaks
        ({"gpuaware/services/alpha/__init__.py": "",
          "gpuaware/services/beta/__init__.py": "",
          "gpuaware/zzlib/__init__.py": "import gpuaware.services.alpha\n"}, "libs never import services BROKEN"),
        # a library through another's public API: kept; reaching into one of its modules: broken
        ({"gpuaware/services/alpha/__init__.py": "", "gpuaware/services/beta/__init__.py": "",
          "gpuaware/zzlib/__init__.py": "from gpuaware.bus import Channel\n"}, None),
        ({"gpuaware/services/alpha/__init__.py": "", "gpuaware/services/beta/__init__.py": "",
          "gpuaware/zzlib/__init__.py": "from gpuaware.bus.codec import Channel\n"},
         "others import gpuaware.bus, not its modules BROKEN"),
        # a service reaching into the schemas' modules: broken too
        ({"gpuaware/services/alpha/__init__.py": "from gpuaware.schemas.pods import PodPending\n",
          "gpuaware/services/beta/__init__.py": ""}, "others import gpuaware.schemas, not its modules BROKEN"),
    ],
)
def test_import_contracts(tmp_path: Path, files: dict[str, str], broken: str | None) -> None:
    result = _lint(_portion(tmp_path, files))
    output = result.stdout + result.stderr
    if broken is None:
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0, output
        assert broken in output, output
