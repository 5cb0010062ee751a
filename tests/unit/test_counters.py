"""Every counter name written or read is declared once, in crawler/engine/counters.py.

A shard's counters are plain ``Counter``s written by several modules and read back with
``.get(name, 0)``: a misspelt name is a silent 0 in stats.json, progress and metrics.
This test reads the source (``ast``) of crawler/, actors/ and jobs/ and collects every
key used on those counters:

* ``x.counters[...]``, ``x._counters[...]``, ``x.dropped[...]``, ``s["counters"][...]``,
  ``.get(...)`` on any of them, and on local names bound to them
  (``c = total["counters"]``) or parameters that receive them (``counts: Counter``);
* a string key must be declared (:data:`COUNTERS` or :data:`DROPPED`); a key built at
  run time (``f"dup_{kind}"``, ``"render_" + key``) must start with a declared family;
* a key that is only a variable (``counters[row.outcome]``) is allowed at the few sites
  listed in ``DYNAMIC``, each with a check that the values it can take are declared.

It also refuses one counter handed where the other is expected (``dropped=`` given the
shard's counters), which is how links dropped from a feed ended up among the counters.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from dataclasses import dataclass

from crawler.engine.counters import COUNTERS, DROPPED, FAMILIES, declared
from crawler.output import OUTCOMES
from crawler.output.schema import DUP_KINDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ("crawler", "actors", "jobs")
# The seen set's counters are its own persisted record (SeenSet.stats()), not a shard's.
SKIPPED = ("crawler/seen/",)

ATTRS = {"counters": "counters", "_counters": "counters", "dropped": "dropped"}
PARAMS = {"counters": "counters", "dropped": "dropped", "counts": "dropped"}  # parameters typed Counter
# Names that hold counters but that the scanner cannot tell from their binding.
ALIASES = {
    ("crawler/session/crawlstats.py", "render_summary", "c"): "counters",
    ("crawler/parse/html.py", "is_html", "counters"): "counters",  # typed MutableMapping (parse/ knows no Counter)
}
# Sites that write a key held in a variable: (file, counter, key expression).
DYNAMIC = {
    ("crawler/engine/recorder.py", "counters", "row.outcome"),  # checked: OUTCOMES are declared
    ("crawler/policy/links.py", "dropped", "reason"),  # checked: LinkPolicy._verdicts and TrapRules.check/_shape
    ("crawler/engine/pipeline.py", "dropped", "reason"),  # checked: PagePipeline.redirect and TrapRules.check
}
NAMES = {"counters": COUNTERS, "dropped": DROPPED}


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    counter: str  # "counters" or "dropped"
    how: str  # "literal", "prefix", "dynamic" or "wrong counter"
    key: str
    write: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.counter}[{self.key!r}] ({self.how})"


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.uses: list[Use] = []
        self.scopes: list[dict[str, str]] = [{}]
        self.func: list[str] = []

    # -- what holds a counter ----------------------------------------------------------

    def kind(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr in ATTRS:
            return ATTRS[node.attr]
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in NAMES:
            return node.slice.value
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
        return None

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope: dict[str, str] = {}
        args = node.args
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            if a.arg in PARAMS and a.annotation is not None and "Counter" in ast.unparse(a.annotation):
                scope[a.arg] = PARAMS[a.arg]
            alias = ALIASES.get((self.path, node.name, a.arg))
            if alias:
                scope[a.arg] = alias
        self.scopes.append(scope)
        self.func.append(node.name)
        # Local names bound to a counter anywhere in the function (flow-insensitive).
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                k = self.kind(sub.value)
                if k:
                    scope[sub.targets[0].id] = k
        self.generic_visit(node)
        self.scopes.pop()
        self.func.pop()

    visit_FunctionDef = _enter
    visit_AsyncFunctionDef = _enter

    # -- what is done with it ----------------------------------------------------------

    def _key(self, node: ast.AST, counter: str, line: int, write: bool) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            how, key = "literal", node.value
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            how, key = "prefix", str(node.values[0].value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Constant):
            how, key = "prefix", str(node.left.value)
        else:
            how, key = "dynamic", ast.unparse(node)
        self.uses.append(Use(self.path, line, counter, how, key, write))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        k = self.kind(node.value)
        if k:
            self._key(node.slice, k, node.lineno, isinstance(node.ctx, ast.Store))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and node.args:
            k = self.kind(f.value)
            if k:
                self._key(node.args[0], k, node.lineno, False)
        # One counter handed where the other is expected.
        for kw in node.keywords:
            expected = PARAMS.get(kw.arg or "")
            got = self.kind(kw.value)
            if expected and got and got != expected:
                self.uses.append(Use(self.path, node.lineno, expected, "wrong counter", ast.unparse(kw.value), True))
        if isinstance(f, ast.Attribute) and f.attr in ("follow", "follow_urls") and len(node.args) == 3:
            got = self.kind(node.args[2])  # LinkPolicy.follow*(..., counts): drops by reason
            if got and got != "dropped":
                self.uses.append(Use(self.path, node.lineno, "dropped", "wrong counter", ast.unparse(node.args[2]), True))
        self.generic_visit(node)


def scan_source(source: str, path: str) -> list[Use]:
    s = _Scan(path)
    s.visit(ast.parse(source, path))
    return s.uses


@functools.cache
def scan_tree() -> tuple[Use, ...]:
    uses: list[Use] = []
    for top in SCANNED:
        for file in sorted((ROOT / top).rglob("*.py")):
            rel = file.relative_to(ROOT).as_posix()
            if not rel.startswith(SKIPPED):
                uses.extend(scan_source(file.read_text(encoding="utf-8"), rel))
    return tuple(uses)


def problems(uses) -> list[str]:
    out = []
    for u in uses:
        if u.how == "wrong counter":
            out.append(f"{u.path}:{u.line}: {u.key} is not the {u.counter} counter")
        elif u.how == "literal" and u.key not in NAMES[u.counter]:
            out.append(f"{u}: not declared in crawler/engine/counters.py")
        elif u.how == "prefix" and (u.counter != "counters" or u.key not in FAMILIES):
            out.append(f"{u}: no such family in crawler/engine/counters.py")
        elif u.how == "dynamic" and u.write and (u.path, u.counter, u.key) not in DYNAMIC:
            out.append(f"{u}: a key only known at run time (declare a family, or add the site to DYNAMIC with a check)")
    return out


def test_every_counter_key_in_the_source_is_declared() -> None:
    uses = scan_tree()
    # The scan sees the counters at all: the modules that write and read them.
    assert {u.path for u in uses} >= {
        "crawler/engine/handler.py", "crawler/engine/pipeline.py", "crawler/engine/admission.py", "crawler/freshness/sitemaps.py",
        "crawler/render/renderer.py", "crawler/render/gate.py", "crawler/session/crawlstats.py", "crawler/session/termination.py",
        "crawler/policy/links.py", "actors/metrics.py", "jobs/progress.py",
    }
    assert len([u for u in uses if u.how == "literal"]) >= 70
    assert problems(uses) == []


def test_the_scan_catches_misspelt_keys_and_swapped_counters() -> None:
    source = '''
def page(self, st, kind):
    self.counters["fetchd"] += 1
    self.dropped["scpoe"] += 1
    self.counters[f"dupe_{kind}"] += 1
    c = st["counters"]
    return c.get("retires", 0) + st["counters"].get("requests", 0)

def build(pipeline, links, counts):
    Admission(dropped=pipeline.counters)
    links.follow_urls([], 1, pipeline.counters)
    pipeline.counters[links.reason] += 1
'''
    found = problems(scan_source(source, "crawler/example.py"))
    assert [p.split(": ", 1)[1] for p in found] == [
        "counters['fetchd'] (literal): not declared in crawler/engine/counters.py",
        "dropped['scpoe'] (literal): not declared in crawler/engine/counters.py",
        "counters['dupe_'] (prefix): no such family in crawler/engine/counters.py",
        "counters['retires'] (literal): not declared in crawler/engine/counters.py",
        "pipeline.counters is not the dropped counter",
        "pipeline.counters is not the dropped counter",
        "counters['links.reason'] (dynamic): a key only known at run time (declare a family, "
        "or add the site to DYNAMIC with a check)",
    ]


# -- the values the DYNAMIC sites can take ------------------------------------------------


def _function(path: str, qualname: str) -> ast.AST:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node)
                    if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part)
    return node


def _strings(nodes) -> set[str]:
    """The string constants an expression can evaluate to (or hold in a tuple)."""
    out: set[str] = set()
    todo = list(nodes)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
        elif isinstance(n, ast.Tuple):
            todo.extend(n.elts)
        elif isinstance(n, ast.IfExp):
            todo.extend((n.body, n.orelse))
    return out


def _returned(path: str, qualname: str) -> set[str]:
    return _strings(r.value for r in ast.walk(_function(path, qualname)) if isinstance(r, ast.Return) and r.value)


def test_every_reason_a_link_is_not_followed_for_is_declared() -> None:
    reasons = _link_reasons()
    assert {"scope", "depth", "nofollow", "unsupported_scheme"} <= reasons  # the scan finds them
    assert sorted(reasons - set(DROPPED)) == []


def test_every_outcome_and_duplicate_kind_is_a_declared_counter() -> None:
    assert [o for o in OUTCOMES if o not in COUNTERS] == []
    assert [k for k in DUP_KINDS if f"dup_{k}" not in COUNTERS] == []


def test_every_name_says_what_it_counts() -> None:
    for names in (COUNTERS, FAMILIES, DROPPED):
        assert [n for n, doc in names.items() if len(doc.split()) < 3] == []
    assert set(COUNTERS).isdisjoint(DROPPED)  # a name means one thing
    assert declared("render_decision_js_framework") and declared("dup_exact") and not declared("fetchd")
    assert declared("scope", DROPPED) and not declared("render_x", DROPPED)


def _link_reasons() -> set[str]:
    reasons = _returned("crawler/policy/links.py", "LinkPolicy._verdicts") | _returned("crawler/policy/traprules.py", "TrapRules.check")
    reasons |= _returned("crawler/policy/traprules.py", "TrapRules._shape")
    redirect = _function("crawler/engine/pipeline.py", "PagePipeline.redirect")
    return reasons | _strings(a.value for a in ast.walk(redirect)
                              if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "reason" for t in a.targets))


def test_every_declared_name_is_written_somewhere() -> None:
    """A declaration no code writes is a column that is always 0: wire it or delete it."""
    uses = scan_tree()
    written = {(u.counter, u.key) for u in uses if u.how == "literal" and u.write}
    written |= {("counters", o) for o in OUTCOMES} | {("counters", f"dup_{k}") for k in DUP_KINDS}
    # The render page's notes, added as "render_" + note (crawler.render.renderer).
    page = ast.parse((ROOT / "crawler/render/page.py").read_text(encoding="utf-8"))
    notes = _strings(c.args[0] for c in ast.walk(page) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                     and c.func.attr == "_note" and c.args)
    assert notes, "the scan finds the render notes"
    written |= {("counters", f"render_{n}") for n in notes}
    written |= {("dropped", r) for r in _link_reasons()}
    assert [n for n in COUNTERS if ("counters", n) not in written] == []
    assert [n for n in DROPPED if ("dropped", n) not in written] == []
