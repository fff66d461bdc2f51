"""A short, readable summary of a cProfile dump (`ServiceSettings.profile_out`): the functions that
take the most CPU on their own and in total, per call, so the next bottleneck is visible in
`bench/results/*_profile.txt` without opening a profiler. Paths are shortened to the package."""

from __future__ import annotations

import io
import pstats
import re
from pathlib import Path

__all__ = ["summarise"]

_SITE = re.compile(r"^.*?(?:site-packages|/src|/lib/python3\.\d+)/")
_IDLE = re.compile(r"of 'select\.(?:epoll|poll|kqueue|devpoll)' objects|select\.select")


def _where(key: tuple[str, int, str]) -> str:
    path, line, func = key
    return f"{_SITE.sub('', path)}:{line}({func})" if path != "~" else func


def summarise(prof: Path, *, title: str, per: str = "", count: int = 0, top: int = 25) -> str:
    """Top ``top`` functions by own time and by cumulative time. With ``count`` (e.g. messages or
    decisions handled while profiled) each line also says microseconds per ``per``."""
    stats = pstats.Stats(str(prof), stream=io.StringIO())
    rows = dict(stats.stats)  # type: ignore[attr-defined]  # pstats keeps these attributes out of its stubs
    # the event loop waiting in epoll/select is idle time, not work: reported apart, left out of the totals
    idle_keys = [k for k in rows if k[0] == "~" and _IDLE.search(k[2])]
    idle = sum(rows.pop(k)[2] for k in idle_keys)
    total = stats.total_tt - idle  # type: ignore[attr-defined]  # pstats keeps these attributes out of its stubs
    out = [f"# {title}", f"profiled CPU: {total:.2f} s" + (f" over {count:,} {per}s: {total / count * 1e6:.0f} us per {per}"
                                                           if count else "")
           + (f" (and {idle:.2f} s idle, waiting for events)" if idle else "")]
    for label, idx in (("own time", 2), ("cumulative time", 3)):
        out.append(f"\n## top {top} by {label}")
        out.append(f"{'seconds':>9} {'%':>6} {'calls':>10}" + (f" {'us/' + per:>10}" if count else "") + "  function")
        for key, st in sorted(rows.items(), key=lambda kv: kv[1][idx], reverse=True)[:top]:
            secs = st[idx]
            line = f"{secs:9.3f} {100 * secs / total if total else 0:6.1f} {st[1]:>10,}"
            if count:
                line += f" {secs / count * 1e6:10.1f}"
            out.append(f"{line}  {_where(key)}")
    return "\n".join(out) + "\n"
