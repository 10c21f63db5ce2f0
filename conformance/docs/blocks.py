"""The generated blocks of a hand-written page: the lines between ``<!-- generated:NAME -->``
and ``<!-- /generated:NAME -->`` belong to the build, every other byte to the author."""
from __future__ import annotations

import re

from lossproof.conformance.docs import DocsError

# A marker is a whole line (so a page can mention one in running text or code).
_ANY = re.compile(r"^<!-- (/?)generated:([A-Za-z0-9_.-]+) -->[ \t]*$", re.M)
_BLOCK = re.compile(r"^<!-- generated:([A-Za-z0-9_.-]+) -->[ \t]*\n(.*?)^<!-- /generated:\1 -->", re.S | re.M)


def replace_blocks(text: str, blocks: dict[str, str], where: str = "page") -> str:
    """``text`` with the content between the lines ``<!-- generated:NAME -->`` and
    ``<!-- /generated:NAME -->`` replaced by ``blocks[NAME]`` for every NAME; the markers and
    everything outside them are kept. Every NAME must occur exactly once, and every block in the
    page must have a producer."""
    out, pos, seen, open_name = [], 0, [], None
    for m in _ANY.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if not closing:
            if open_name is not None:
                raise DocsError(f"{where}:{line}: <!-- generated:{name} --> opens inside the block "
                                f"{open_name!r} (close it first)")
            if name not in blocks:
                raise DocsError(f"{where}:{line}: no producer for the generated block {name!r} "
                                f"(known here: {', '.join(blocks) or 'none'})")
            if name in seen:
                raise DocsError(f"{where}:{line}: the generated block {name!r} occurs twice")
            seen.append(name)
            out.append(text[pos:m.end()])
            open_name = name
        else:
            if name != open_name:
                raise DocsError(f"{where}:{line}: <!-- /generated:{name} --> closes a block that is not open")
            body = blocks[name].strip("\n")
            out.append("\n" + body + "\n" if body else "\n")
            pos, open_name = m.start(), None
    if open_name is not None:
        raise DocsError(f"{where}: <!-- generated:{open_name} --> has no closing <!-- /generated:{open_name} -->")
    missing = [n for n in blocks if n not in seen]
    if missing:
        raise DocsError(f"{where}: the generated block {missing[0]!r} is missing: add the lines "
                        f"<!-- generated:{missing[0]} --> and <!-- /generated:{missing[0]} -->")
    out.append(text[pos:])
    return "".join(out)


def read_blocks(text: str) -> dict[str, str]:
    """{NAME: content} of the generated blocks of a page (content without its enclosing newlines)."""
    return {m.group(1): m.group(2).strip("\n") for m in _BLOCK.finditer(text)}
