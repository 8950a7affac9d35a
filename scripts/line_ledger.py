"""Lines of ``datatools/`` by feature at one or more git revisions: information, not a target (issue 56).

    python scripts/line_ledger.py 66e3881 HEAD        # a Markdown table, a column per revision

A feature is a folder of the package (``io`` split into its floors, ``kernels`` into its folders); each cell is
``code / all`` lines of the ``.py`` files under it at that revision: ``all`` counts every line, ``code`` the lines
that are not blank, not comments and not docstrings (the AST's statements' lines, so a wrapped call counts each line).
Read from git objects: the work tree is not touched.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections import Counter

GROUPS = {  # a path prefix -> the feature it belongs to (the longest prefix wins)
    "datatools/io/storage": "io/storage",
    "datatools/io/formats": "io/formats",
    "datatools/io/sources": "io/sources",
    "datatools/io": "io (top)",
    "datatools/kernels/packing": "kernels/packing",
    "datatools/kernels": "kernels (other)",
}


def feature(path: str) -> str:
    """The feature a file of ``datatools/`` counts under."""
    for prefix in sorted(GROUPS, key=len, reverse=True):
        if path.startswith(prefix + "/"):
            return GROUPS[prefix]
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else "(package root)"


def code_lines(text: str) -> int:
    """Lines holding code: those a statement or expression spans, minus docstrings."""
    tree = ast.parse(text)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.stmt, ast.expr)) and hasattr(node, "lineno"):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    comments = {i + 1 for i, line in enumerate(text.splitlines()) if line.strip().startswith("#")}
    return len(lines - docstrings - comments)


def ledger(revision: str) -> dict[str, tuple[int, int]]:
    """Per feature, (code lines, all lines) of the package's ``.py`` files at ``revision``."""
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", revision, "datatools/"], capture_output=True, text=True, check=True
    ).stdout.split()
    code: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for path in (f for f in files if f.endswith(".py")):
        text = subprocess.run(["git", "show", f"{revision}:{path}"], capture_output=True, text=True, check=True).stdout
        code[feature(path)] += code_lines(text)
        total[feature(path)] += len(text.splitlines())
    return {name: (code[name], total[name]) for name in total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="+", help="git revisions, a column each")
    args = parser.parse_args()
    columns = [ledger(r) for r in args.revisions]
    names = sorted(set().union(*columns))
    print("| feature | " + " | ".join(f"{r} code / all" for r in args.revisions) + " |")
    print("|---|" + "---:|" * len(columns))
    for name in [*names, "total"]:
        cells = []
        for column in columns:
            if name == "total":
                code, total = sum(c for c, _ in column.values()), sum(t for _, t in column.values())
            else:
                code, total = column.get(name, (0, 0))
            cells.append(f"{code:,} / {total:,}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
