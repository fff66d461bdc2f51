"""Find subjects and JetStream consumer names built from names without the contract's rule.

The rule (``gpuaware.schemas.subjects``): a name (a cluster, node, GPU, tenant, queue, model ...) becomes
one subject token through ``subject_token`` -- which ``bus.Channel.at`` / ``.under`` apply to every name
they get -- and a consumer name through ``consumer_name`` (or a ``*_durable`` helper built on it). This
scanner reads the code (AST, no import) and reports every other construction:

* a *subject* built by string operations -- an f-string, ``+``, ``".".join(...)``, ``str.format`` or
  ``%`` -- that holds a subject of the contract (a constant such as ``GPU_SAMPLED``, a literal starting
  with one of the contract's first tokens such as ``"telemetry."``, or a value named ``subject``) and
  joins to it, with a dot, a value that is not a subject or a token itself;
* a *consumer name* built the same way from such a value: the durable argument of the bus's consumer
  functions, a variable or ``*_durable`` function result, or a ``*DURABLE*`` environment entry.

A value passes when it is a literal, an UPPER_CASE constant, a call of ``subject_token`` /
``consumer_name`` / a ``*_durable`` helper, or is named for what it holds (``...subject``, ``...token``,
``...pattern``, ``...prefix``; for consumer names also ``...durable``): the name says it was made by the
rule or is not a name. Anything else -- ``cluster``, ``msg.node``, ``settings.cluster`` -- is a name.

Usage: ``python tests/lint/subject_scan.py [PATH ...]`` prints the offenders and exits 1 when there are any.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULE_MODULE = REPO / "schemas" / "src" / "gpuaware" / "schemas" / "subjects.py"

RULE_CALLS = frozenset({"subject_token", "consumer_name"})
CONSUMER_FUNCTIONS = {"subscribe_durable": 2, "subscribe_batched": 2, "subscribe_pipelined": 2, "start_consumer": 3,
                      "delete_consumer": 1, "consumer_info": 1}
"""bus / nats-py calls taking a consumer name, and its positional index"""
_SUBJECT_NAMED = re.compile(r"(^|_)(subject|subjects|token|tokens|pattern|patterns|prefix)$", re.IGNORECASE)
_DURABLE_NAMED = re.compile(r"durable", re.IGNORECASE)
_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


def contract() -> tuple[frozenset[str], frozenset[str]]:
    """The contract's subject constants (their names) and the first tokens its subjects start with."""
    from gpuaware import schemas

    subjects = {*schemas.MESSAGES, *schemas.REQUESTS, *(p for s in schemas.STREAMS for p in s.subjects),
                *(e for es in schemas.OPERATIONAL_ENDPOINTS.values() for e in es)}
    roots = {s.split(".")[0] for s in subjects} | {schemas.DEAD_LETTER_PREFIX}
    constants = {name for name in schemas.__all__
                 if isinstance(value := getattr(schemas, name), str) and value.split(".")[0] in roots
                 and ("." in value or value in roots) and _CONSTANT.match(name)}
    return frozenset(constants), frozenset(roots)


@dataclass(frozen=True)
class Offence:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _identifier(node: ast.AST) -> str | None:
    """The name a value goes by: ``x`` -> x, ``a.b.c`` -> c, ``f(...)`` / ``a.f(...)`` -> f."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _identifier(node.func)
    if isinstance(node, ast.Subscript):
        return _identifier(node.value)
    return None


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dot_beside(pieces: list[ast.AST], i: int) -> bool:
    before = _text(pieces[i - 1]) if i > 0 else None
    after = _text(pieces[i + 1]) if i + 1 < len(pieces) else None
    return (before is not None and before.endswith(".")) or (after is not None and after.startswith("."))


class Scanner(ast.NodeVisitor):
    def __init__(self, path: str, constants: frozenset[str], roots: frozenset[str]) -> None:
        self.path = path
        self.constants = constants
        self.roots = roots
        self.offences: list[Offence] = []
        self._seen: set[int] = set()
        self._consumer_functions = dict(CONSUMER_FUNCTIONS)

    # -- what a piece of a construction is -----------------------------------------------------------
    def _is_rule_call(self, node: ast.AST) -> bool:
        name = _identifier(node) if isinstance(node, ast.Call) else None
        return name is not None and (name in RULE_CALLS or name.endswith("_durable"))

    def _is_subject(self, node: ast.AST) -> bool:
        """A subject of the contract (what anchors a construction as a subject)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.split(".")[0] in self.roots and "." in node.value
        name = _identifier(node)
        if isinstance(node, ast.Call):
            return name in {"dead_letter_subject", "base_subject", "subject_of"}
        return name is not None and (name in self.constants or bool(re.search(r"(^|_)subject$", name, re.I))
                                     or name == "any_version")

    def _passes(self, node: ast.AST, *, durable: bool) -> bool:
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.FormattedValue):
            return self._passes(node.value, durable=durable)
        if isinstance(node, ast.Starred):
            return self._passes(node.value, durable=durable)
        if isinstance(node, ast.GeneratorExp | ast.ListComp):
            return self._passes(node.elt, durable=durable)
        if isinstance(node, ast.JoinedStr):
            return all(self._passes(v, durable=durable) for v in node.values)
        if self._is_rule_call(node) or self._is_subject(node):
            return True
        name = _identifier(node)
        if name is None:
            return False
        return bool(_CONSTANT.match(name) or _SUBJECT_NAMED.search(name)
                    or (durable and _DURABLE_NAMED.search(name)))

    # -- constructions --------------------------------------------------------------------------------
    def _pieces(self, node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]] | None:
        """(every piece, the pieces that are tokens of a dotted subject) of a string construction, or None
        when ``node`` is not one. In an f-string or a ``+`` chain a value is a token when a dot is next to it;
        in ``"."-join`` / ``.format`` / ``%`` every value is when the separator or the template has a dot."""
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            pieces = self._concatenated(node)
            if pieces is None:
                return None
            return pieces, [p for i, p in enumerate(pieces) if not _text(p) and _dot_beside(pieces, i)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _text(node.left):
            args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return [node.left, *args], (args if "." in _text(node.left) else [])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _text(node.func.value) is not None:
            template = node.func.value
            if node.func.attr == "format":
                args = [*node.args, *(k.value for k in node.keywords)]
                return [template, *args], (args if "." in _text(template) else [])
            if node.func.attr == "join" and node.args:
                arg = node.args[0]
                elts = list(arg.elts) if isinstance(arg, ast.Tuple | ast.List | ast.Set) else [arg]
                return [template, *elts], (elts if "." in _text(template) else [])
        return None

    def _concatenated(self, node: ast.AST) -> list[ast.AST] | None:
        if isinstance(node, ast.JoinedStr):
            return [v.value if isinstance(v, ast.FormattedValue) else v for v in node.values]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._concatenated(node.left), self._concatenated(node.right)
            if left is None and right is None and _text(node.left) is None and _text(node.right) is None:
                return None  # arithmetic, or a sum of unknowns
            return [*(left if left is not None else [node.left]), *(right if right is not None else [node.right])]
        return None

    def _subject_construction(self, node: ast.AST) -> None:
        if id(node) in self._seen:
            return
        found = self._pieces(node)
        if found is None:
            return
        self._seen.update(id(n) for n in ast.walk(node))
        pieces, tokens = found
        if not tokens or not any(self._is_subject(p) for p in pieces):
            return
        bad = [t for t in tokens if not self._passes(t, durable=False)]
        if bad:
            self._report(node, "a subject built from " + ", ".join(map(ast.unparse, bad))
                         + " without subject_token (use bus.Channel.at / .under, or subject_token)")

    def _durable_construction(self, node: ast.AST | None, where: str) -> None:
        if isinstance(node, ast.BoolOp):  # `configured or f"placement-{cluster}"`
            for value in node.values:
                self._durable_construction(value, where)
            return
        if isinstance(node, ast.IfExp):
            self._durable_construction(node.body, where)
            self._durable_construction(node.orelse, where)
            return
        found = self._pieces(node) if node is not None else None
        if node is None or found is None:
            return
        bad = [p for p in found[0] if not self._passes(p, durable=True)]
        if bad:
            self._report(node, f"a consumer name ({where}) built from " + ", ".join(map(ast.unparse, bad))
                         + " without consumer_name")

    def _report(self, node: ast.AST, what: str) -> None:
        self.offences.append(Offence(self.path, getattr(node, "lineno", 0), what))

    # -- visiting -------------------------------------------------------------------------------------
    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.JoinedStr | ast.BinOp | ast.Call):
            self._subject_construction(node)
        super().generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        """Functions of the module taking a consumer name (a parameter named ``...durable...``) are checked
        at their calls like the bus's."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [a.arg for a in (*sub.args.posonlyargs, *sub.args.args)]
                offset = 1 if params[:1] in (["self"], ["cls"]) else 0
                at = next((i - offset for i, a in enumerate(params) if _DURABLE_NAMED.search(a)), None)
                if at is not None and at >= 0:
                    self._consumer_functions.setdefault(sub.name, at)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _identifier(node.func)
        if name in self._consumer_functions:
            at = self._consumer_functions[name]
            self._durable_construction(node.args[at] if len(node.args) > at else None, f"argument of {name}")
        for kw in node.keywords:
            if kw.arg and _DURABLE_NAMED.search(kw.arg):
                self._durable_construction(kw.value, f"{kw.arg}=")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            name = _identifier(target)
            if name and _DURABLE_NAMED.search(name):
                self._durable_construction(node.value, name)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and "DURABLE" in key.value.upper():
                self._durable_construction(value, key.value)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if _DURABLE_NAMED.search(node.name) or node.name.endswith("consumer_name"):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return):
                    self._durable_construction(sub.value, f"what {node.name} returns")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef


def scan_source(source: str, path: str = "<source>") -> list[Offence]:
    """The offences in one module's source."""
    constants, roots = contract()
    scanner = Scanner(path, constants, roots)
    scanner.visit(ast.parse(source))
    return scanner.offences


def scanned_files(root: Path = REPO) -> Iterator[Path]:
    """Every module of the schemas, the libraries and the services (the rule itself excepted)."""
    for pattern in ("schemas/src/**/*.py", "libs/*/src/**/*.py", "services/*/src/**/*.py"):
        for path in sorted(root.glob(pattern)):
            if path.resolve() != RULE_MODULE:
                yield path


def scan(paths: Iterable[Path]) -> list[Offence]:
    out: list[Offence] = []
    for path in paths:
        rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
        out += scan_source(path.read_text(), rel)
    return out


if __name__ == "__main__":
    found = scan([Path(p).resolve() for p in sys.argv[1:]] or scanned_files())
    print("\n".join(map(str, found)) or "no subject or consumer name built from a name without the rule")
    sys.exit(1 if found else 0)
