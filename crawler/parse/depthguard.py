"""Pathological nesting guard: the pages whose DOM would cost quadratic time to build.

The HTML tree builder walks the stack of open elements for many tags ("has a p element
in button scope", "any other end tag"), so N tags at nesting depth D cost O(N * D):
100k unclosed <div> (500 KB) take ~20 s in lexbor. Browsers cap the depth (Blink at
512); lexbor does not. A page with few tags cannot be deep, so only bodies with many
'<' pay for a depth estimate (:func:`too_deep`), and crawler.parse.html parses a page
over budget from a flattened copy (:data:`FLATTEN`).
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["FLATTEN", "too_deep"]

_GUARD_MIN_TAGS = 7000  # below this, N * D <= N**2 stays under the budget
_STACK_WORK_BUDGET = 50_000_000  # ~0.1 s of tree-builder stack walking
# Void elements never open a level; the others are closed implicitly by their next
# sibling (<a> by the adoption agency algorithm), so they do not nest deep in practice.
_NO_DEPTH = frozenset(
    b"area base br col embed hr img input link meta param source track wbr keygen frame "
    b"basefont bgsound image p li dd dt td th tr option optgroup rb rp rt rtc tbody thead "
    b"tfoot colgroup caption a".split()
)
_NO_DEPTH_END = frozenset(b"/" + name for name in _NO_DEPTH)
# Start and end tag names ("div", "/div"); a name must end like a tag, so "<a<a<a..."
# (one giant tag name to the tree builder) costs nothing here either.
_TAG_SCAN = re.compile(rb"<(/?[A-Za-z][A-Za-z0-9]*)(?=[ \t\n\x0c\r/>])")
#: Every tag except the ones parse_page reads; "[^<>]*" keeps each match local, so an
#: unterminated tag cannot make the regex rescan the rest of the body (no quadratic case).
FLATTEN = re.compile(
    rb"</?(?!(?:a|area|base|meta|title)[ \t\n\x0c\r/>])[A-Za-z][^<>]*>?", re.IGNORECASE
)


def too_deep(data: bytes) -> bool:
    """True when building the DOM of ``data`` could exceed the stack-walk budget."""
    if len(data) < 3 * _GUARD_MIN_TAGS:  # a tag takes at least 3 bytes ("<b>")
        return False
    # numpy counts 3x faster than bytes.count, and this runs for every larger page.
    n_tags = int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 0x3C))
    if n_tags < _GUARD_MIN_TAGS:
        return False
    depth = deepest = 0
    no_depth, no_depth_end = _NO_DEPTH, _NO_DEPTH_END
    for name in _TAG_SCAN.findall(data):
        name = name.lower()
        if name[0] == 0x2F:  # '/'
            if name not in no_depth_end:
                depth -= depth > 0
        elif name not in no_depth:
            depth += 1
            if depth > deepest:  # noqa: PLR1730 - hot loop: a compare costs less than a max() call
                deepest = depth
    return deepest * n_tags > _STACK_WORK_BUDGET
