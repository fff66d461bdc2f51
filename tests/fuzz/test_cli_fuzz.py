"""Fuzzing the `gpuaware` command as a user runs it: every sub-command, hostile arguments and files.

The sub-commands are enumerated from the command tree (a new one is fuzzed without a change here).
For each, hypothesis draws values for its options and arguments from what breaks programs: huge,
negative, non-finite and non-numeric numbers, missing / unwritable / non-UTF-8 / over-long paths,
folders where files go, garbage files and CSVs with the right header and hostile cells. Each draw runs
in a process of its own, under a 2 GiB address-space limit (RLIMIT_AS) and a timeout, with NATS and
PostgreSQL pointed at a closed port (nothing is started). The properties, the CLI's error policy:

* it ends within the timeout, with exit status 0, 1, 2 or 3 (not killed, not out of memory);
* no traceback on standard output or standard error;
* a non-zero exit says why on standard error; exit 0 prints no error;
* a failed run changes nothing in its working folder (no empty or half-written output), and no run
  leaves a temporary ``*.partial`` output behind or an empty folder it made;
* every JSON file it writes is strict JSON (no ``NaN`` / ``Infinity``).

`up`, `demo`, `drill` and `alerts bridge` start servers or processes when their input is good, so only
their argument validation is fuzzed: one value each draw that their declared bounds refuse.

Speed: importing the CLI costs seconds under load, so one driver process imports it once and forks a
child per draw (the child sets the limit, its own session, working folder, environment and standard
streams, then runs the console entry point exactly as the `gpuaware` script does). `make test` runs a
couple of draws per sub-command (derandomized); `make fuzz` (HYPOTHESIS_PROFILE=fuzz) many more,
GPUAWARE_CLI_FUZZ_EXAMPLES to choose.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaware.cli.main import app
from gpuaware.sim import synthetic_nodes, synthetic_pods, write_nodes, write_pods

ADDRESS_SPACE = 2 * 1024**3
FUZZING = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
TIMEOUT_S = 300.0 if FUZZING else 90.0
"""per draw; a draw that hits it has hung (every input here is refused or finishes in seconds; under
the fuzz profile a forecast may train on a short series, half a minute on a quiet machine)"""
EXAMPLES = int(os.environ.get("GPUAWARE_CLI_FUZZ_EXAMPLES", "150" if FUZZING else "2"))
VALIDATION_ONLY = {"up", "demo", "drill", "alerts bridge"}
"""these start servers or processes on good input: only values their bounds refuse are drawn"""
UNREACHABLE = {"NATS_URL": "nats://127.0.0.1:1",
               "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2",
               "PGCONNECT_TIMEOUT": "2"}

DRIVER = r'''
import json, os, resource, select, signal, sys, traceback
import gpuaware.cli.main as cli

limit = int(sys.argv[1])
for line in sys.stdin:
    req = json.loads(line)
    out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            sys.argv = ["gpuaware", *(os.fsdecode(bytes.fromhex(a)) for a in req["argv"])]
            try:
                cli.app(prog_name="gpuaware")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()  # what the interpreter would print for an uncaught error
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(out)
    os.close(err)
    fd = os.pidfd_open(pid)
    ready, _, _ = select.select([fd], [], [], req["timeout"])
    timed_out = not ready
    try:
        os.killpg(pid, signal.SIGKILL)  # the child's session: worker processes it left, or all of it
    except (ProcessLookupError, PermissionError):
        pass
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out}), flush=True)
'''


@dataclass(frozen=True)
class Outcome:
    rc: int
    timed_out: bool
    stdout: str
    stderr: str


class Driver:
    """The process that imported the CLI; ``run`` forks one child per command line."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.log = (home / "driver.log").open("wb")
        env = {**os.environ, "COLUMNS": "100", "HOME": str(home)}
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(ADDRESS_SPACE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=home)

    def run(self, argv: list[bytes], cwd: Path, env: dict[str, str], timeout: float = TIMEOUT_S) -> Outcome:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        out, err = cwd.parent / f"{cwd.name}.stdout", cwd.parent / f"{cwd.name}.stderr"
        req = {"argv": [a.hex() for a in argv], "cwd": str(cwd), "env": env, "timeout": timeout,
               "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 60)
        assert ready, "the fuzz driver stopped answering"
        line = self.proc.stdout.readline()
        assert line, f"the fuzz driver died: {(self.home / 'driver.log').read_text(errors='replace')[-2000:]}"
        reply = json.loads(line)
        return Outcome(reply["rc"], reply["timed_out"], out.read_text(errors="replace"),
                       err.read_text(errors="replace"))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="module")
def driver() -> Iterator[Driver]:
    home = Path(tempfile.mkdtemp(prefix="gpuaware-cli-fuzz-"))
    d = Driver(home)
    yield d
    d.close()
    shutil.rmtree(home, ignore_errors=True)


# --- the command tree ------------------------------------------------------------------------------------


def leaves(cmd=None, path: tuple[str, ...] = ()) -> Iterator[tuple[str, object]]:
    cmd = cmd or typer.main.get_command(app)
    subs = getattr(cmd, "commands", None)
    if not subs:
        yield " ".join(path), cmd
        return
    for name, sub in sorted(subs.items()):
        yield from leaves(sub, (*path, name))


COMMANDS = dict(leaves())


def test_every_sub_command_is_fuzzed() -> None:
    """The tree is what the fuzz walks; a sub-command that starts servers must be listed as such."""
    assert {"eval placement", "forecast evaluate", "health evaluate", "health cordon", "quota report",
            "status"} <= set(COMMANDS)
    assert set(COMMANDS) >= VALIDATION_ONLY


# --- hostile values ---------------------------------------------------------------------------------------

NUMBERS = ["nan", "NaN", "inf", "-inf", "1e400", "-1e400", "-1", "0", "-0", "1e308", "4294967296",
           "99999999999999999999999", "-99999999999999999999", "0x10", "", " ", "abc", "1_000", "\u0663", "1e-320"]
TEXTS = ["0-99999999999", "1,2,3,99999999999", "-5--1", "9" * 400, "99999999999d", "1e400d", "nan", "latest",
         "", ",", "--", "-", "../../etc/passwd", "nats://127.0.0.1:1", "nats://", "garbage://x:y",
         "postgresql://nobody@127.0.0.1:1/x?connect_timeout=2", "philly", "helios", "gentd26", "9999-12-31T23:59",
         "1969-12-31", "42-41", "10,30", "tenant", "pod", "FGD", "Random,FGD", "kill:binder@10+1", "\u202e", "é" * 50]
HELIOS = ("time,running_gpu_num,pending_gpu_num\n" + "".join(
    f"2020-05-0{1 + m // 1440} {m // 60 % 24:02d}:{m % 60:02d}:00,{40 + (m // 60 % 24)},0\n"
    for m in range(5 * 1440))).encode()
"""five days of a Helios-format series (minutes), enough to split but short to train on"""
HEADERS = ["sn,cpu_milli,memory_mib,gpu,model", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time",
           "Server,Time,EccType", "time,running_gpu_num,pending_gpu_num"]
argtext = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)


def number_values(kind: str) -> st.SearchStrategy[str]:
    ints = st.integers(-(2**70), 2**70).map(str)
    if kind == "int":
        return st.sampled_from(NUMBERS) | ints | st.integers(-3, 70).map(str)
    return st.sampled_from(NUMBERS) | ints | st.floats().map(repr) | st.floats(0.001, 3.0).map(repr)


def _csv_cell() -> st.SearchStrategy[str]:
    return st.sampled_from(NUMBERS) | st.integers(-(2**70), 2**70).map(str) | argtext.filter(
        lambda s: "\n" not in s and "\r" not in s)


@st.composite
def garbage_files(draw: st.DrawFn) -> dict[str, bytes]:
    """The files a draw may name: random bytes, CSVs with a known header and hostile cells, non-UTF-8."""
    files = {"garbage.bin": draw(st.binary(max_size=400)), "empty.csv": b""}
    header = draw(st.sampled_from(HEADERS))
    rows = draw(st.lists(st.lists(_csv_cell(), min_size=1, max_size=7), max_size=8))
    text = header + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    files["hostile.csv"] = text.encode("utf-8", errors="surrogateescape")
    files["latin1-\xe9.csv".encode("latin-1").decode(errors="surrogateescape")] = (header + "\n\xff\xfe,1,CE\n").encode(
        "latin-1")
    files["hbm.csv"] = b"Server,Time,EccType\nA,1650690000,CE\nA,1650693600,UER\n"
    if FUZZING:  # a series long enough to train on: a forecast run takes half a minute
        files["helios.csv"] = HELIOS
    return files


PATH_NAMES = ["missing.csv", "missing-dir/x.csv", "garbage.bin", "empty.csv", "hostile.csv", "hbm.csv",
              "nodes.csv", "pods.csv", "dir", "afile/under", "/dev/null", "out", "new/deeper/out", "a" * 300,
              "dir/../dir", "loop", "-", " ", "with\nnewline", "\xff\xfe-not-utf8"]
"""relative to the draw's working folder; "afile" is a file, "dir" a folder holding a file, "loop" a
symlink to itself, "\xff\xfe..." is bytes that are not UTF-8 (passed as such)"""


def workspace(base: Path, files: dict[str, bytes]) -> None:
    base.mkdir()
    for name, data in files.items():
        (base / name).write_bytes(data)
    (base / "afile").write_bytes(b"x")
    (base / "dir").mkdir()
    (base / "dir" / "keep.txt").write_text("mine")
    (base / "loop").symlink_to("loop")
    write_nodes(base / "nodes.csv", synthetic_nodes(4, seed=1))
    write_pods(base / "pods.csv", synthetic_pods(12, seed=2))


def kind_of(param) -> type:
    """The parameter's declared Python type (typer keeps the annotation, ``int | None`` unwrapped)."""
    return param.type_descriptor.annotation


def is_path(param) -> bool:
    kind = kind_of(param)
    return (isinstance(kind, type) and issubclass(kind, Path)) or param.name in ("out", "csv_path", "data_dir",
                                                                                  "series")


PLAUSIBLE = {"nodes": ["nodes.csv"], "trace": ["pods.csv"], "hbm_errors": ["hbm.csv"], "series": ["helios.csv" if FUZZING else "hbm.csv"],
             "out": ["out", "dir", "new/deeper/out"], "csv_path": ["r.csv", "dir/r.csv"], "data_dir": ["stack"],
             "seeds": ["42", "1-3"], "horizons": ["10", "10,30"], "lead_hours": ["1,6", "0"], "since": ["24h", "7d"],
             "until": ["now", "1h"], "by": ["tenant", "queue", "pod"], "policies": ["FGD", "BestFit,Random"],
             "fmt": ["helios"], "model": ["missing.onnx", "garbage.bin", "latest"], "cluster": ["default"],
             "reason": ["fuzz"], "gpu": ["GPU-1"], "nats_url": [UNREACHABLE["NATS_URL"]],
             "database_url": [UNREACHABLE["DATABASE_URL"]], "iters": ["1", "3"], "max_seconds": ["1", "2"],
             "timeout": ["0.5", "1"], "jobs": ["1", "2"], "max_pods": ["5", "50"], "test_days": ["1", "2"],
             "time_scale": ["30000", "1"]}
"""what a user would pass, so that a draw's one or two hostile values meet a command that runs"""


ABSENT_WHEN_PLAUSIBLE = {"split", "tls_ca"}
"""options a user leaves out (``--split`` names one split, of one format; a CA file for TLS)"""


def plausible(param) -> st.SearchStrategy[bytes]:
    if param.name in PLAUSIBLE:
        return st.sampled_from(PLAUSIBLE[param.name]).map(os.fsencode)
    bounds = getattr(param.callback, "bounds", None)
    if bounds:
        lo, hi, _ = bounds
        return st.floats(max(lo, 0.001), min(hi, max(lo, 0.001) + 10.0)).map(repr).map(os.fsencode)
    kind = kind_of(param)
    if kind in (int, float):
        lo = param.min if getattr(param, "min", None) is not None else 0
        return st.integers(int(lo), int(lo) + 5).map(str).map(os.fsencode)
    return st.sampled_from(["x", "default"]).map(os.fsencode)


def value_for(param) -> st.SearchStrategy[bytes]:
    """Hostile values for one parameter, as argv bytes."""
    if is_path(param):
        return st.sampled_from(PATH_NAMES).map(lambda s: os.fsencode(s) if not s.startswith("\xff") else
                                               b"\xff\xfe-not-utf8")
    kind = kind_of(param)
    if param.name == "timeout":  # a long valid timeout only waits longer for the closed port
        values = st.sampled_from(NUMBERS) | st.floats(0.001, 2.0).map(repr)
    elif kind is int:
        values = number_values("int")
    elif kind is float:
        values = number_values("float")
    else:
        values = st.sampled_from(TEXTS) | argtext
    return values.map(os.fsencode)


def refused_value(param) -> st.SearchStrategy[bytes] | None:
    """A value this parameter's own declaration refuses, or None when it declares nothing to refuse."""
    bounds = getattr(param.callback, "bounds", None)
    kind = kind_of(param)
    if bounds:
        lo, hi, lo_open = bounds
        bad = ["nan", "inf", "-inf", "1e400", repr(lo - 1.0 - abs(lo)), repr(hi * 2 + 1.0), "abc"]
        return st.sampled_from(bad + ([repr(lo)] if lo_open else [])).map(os.fsencode)
    if kind in (int, float):
        bad = ["abc", "", "1.5x"]  # nan passes a float range (every comparison with it is false)
        if getattr(param, "min", None) is not None:
            bad.append(str(int(param.min) - 1))
        if getattr(param, "max", None) is not None:
            bad.append(str(int(param.max) + 1))
        return st.sampled_from(bad).map(os.fsencode)
    return None


@st.composite
def command_lines(draw: st.DrawFn, name: str) -> list[bytes]:
    cmd = COMMANDS[name]
    params = [p for p in cmd.params if p.name != "help"]
    if name in VALIDATION_ONLY:
        refusable = [(p, s) for p in params if p.opts and p.opts[0].startswith("--")
                     for s in [refused_value(p)] if s is not None]
        argv: list[bytes] = [b"--data-dir", b"stack"] if any(p.name == "data_dir" for p in params) else []
        argv += [b"--out", b"out"] if any(p.name == "out" for p in params) else []
        if refusable and draw(st.integers(0, 9)):
            param, bad = draw(st.sampled_from(refusable))
            argv += [os.fsencode(param.opts[0]), draw(bad)]
        else:
            argv += [b"--no-such-option"]
        return argv
    # one or two hostile values a draw (sometimes none, sometimes all): with every value hostile, click
    # refuses nearly every draw before the command runs, and the command's own checks go untested
    valued = [p for p in params if not (getattr(p, "is_flag", False) and not getattr(p, "count", False))]
    mode = draw(st.sampled_from(["few"] * 6 + ["none", "all"]))
    hostile = ({p.name for p in valued} if mode == "all" else set() if mode == "none" else
               set(draw(st.lists(st.sampled_from([p.name for p in valued]), min_size=1, max_size=2))) if valued
               else set())
    argv = []
    for p in params:
        if getattr(p, "is_flag", False) and not getattr(p, "count", False):
            if draw(st.booleans()):
                argv.append(os.fsencode(draw(st.sampled_from(p.opts + p.secondary_opts))))
            continue
        if not (p.required or p.name in hostile or (p.name not in ABSENT_WHEN_PLAUSIBLE and draw(st.booleans()))):
            continue
        repeat = draw(st.integers(1, 3)) if getattr(p, "multiple", False) else 1
        for _ in range(repeat):
            value = draw(value_for(p) if p.name in hostile else plausible(p))
            argv += [os.fsencode(p.opts[0]), value] if p.opts[0].startswith("-") else [value]
    if draw(st.integers(0, 19)) == 0:
        argv.append(b"--no-such-option")
    return argv


def snapshot(base: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``base``: kind and size (files), so a failed run can be checked to change nothing."""
    seen = {}
    for root, dirs, files in os.walk(base):
        for n in dirs + files:
            p = Path(root) / n
            st_ = p.lstat()
            kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
            seen[str(p.relative_to(base))] = (kind, st_.st_size if kind == "file" else 0)
    return seen


ERROR_WORD = re.compile(r"\b(error|traceback|exception)\b", re.IGNORECASE)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def check(name: str, argv: list[bytes], outcome: Outcome, base: Path, before: dict, after: dict) -> None:
    shown = f"gpuaware {name} {b' '.join(argv)!r}\n--- stdout\n{outcome.stdout[-3000:]}\n--- stderr\n" \
            f"{outcome.stderr[-3000:]}"
    assert not outcome.timed_out, f"hung for {TIMEOUT_S:.0f} s: {shown}"
    assert outcome.rc in (0, 1, 2, 3), f"exit status {outcome.rc} (negative: killed by a signal): {shown}"
    assert "Traceback" not in outcome.stderr and "Traceback" not in outcome.stdout, shown
    if outcome.rc:
        assert outcome.stderr.strip(), f"exit {outcome.rc} without a reason on standard error: {shown}"
    else:
        assert not ERROR_WORD.search(outcome.stderr), f"exit 0 with an error on standard error: {shown}"
    partial = [p for p in after if ".partial" in p]
    assert not partial, f"temporary output left behind {partial}: {shown}"
    made_empty = [p for p, (kind, _) in after.items() if kind == "dir" and p not in before
                  and not any(q.startswith(p + "/") for q in after)]
    assert not made_empty, f"empty folders made {made_empty}: {shown}"
    if outcome.rc:
        changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        assert not changed, f"a failed run changed {sorted(changed)[:10]}: {shown}"
    for p in after:
        if p.endswith(".json") and after[p] != before.get(p):  # strict JSON: no NaN or Infinity
            json.loads((base / p).read_text(), parse_constant=_no_constant)


def run_in_workspace(driver: Driver, name: str, argv: list[bytes], files: dict[str, bytes]) -> None:
    root = Path(tempfile.mkdtemp(prefix="draw-", dir=driver.home))
    try:
        base = root / "ws"
        workspace(base, files)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(root), "MPLCONFIGDIR": str(root / "mpl"),
               "TMPDIR": str(root), "LANG": "C.UTF-8", "COLUMNS": "100", **UNREACHABLE}
        before = snapshot(base)
        outcome = driver.run([os.fsencode(w) for w in name.split()] + argv, base, env)
        check(name, argv, outcome, base, before, snapshot(base))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(COMMANDS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_command_lines_get_the_error_policy(driver: Driver, name: str, data: st.DataObject) -> None:
    files = data.draw(garbage_files(), label="files")
    argv = data.draw(command_lines(name), label="argv")
    run_in_workspace(driver, name, argv, files)
