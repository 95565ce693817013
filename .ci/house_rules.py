"""House rules `make lint` checks (docs/development.md, "House rules").

`python .ci/house_rules.py [PATH ...]` lists every line of the project's code and tests (git's
files ending .py, .pyi, .c, .sh under PATH) that names an issue number ("issue" and a number, or
"#" and a number; a reference that names another project, osiris#N or Strimzi #N, is not one), and exits 1
if there is one. `--docstrings N` lists the module docstrings longer than N lines instead,
and exits 1 if there is one (a docstring states the contract; the mechanism belongs in docs/).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

#: "issue", "issues" or "issue #" and a number; "#" and a number alone, unless a name is just before it
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w#])(?<!\w )#\d{1,5}\b", re.IGNORECASE)
SUFFIXES = (".py", ".pyi", ".c", ".sh")
#: generated code (flatc's) is not ours to word
SKIP = ("/fbs/",)


def issue_numbers(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` (number from 1, the line) that name an issue number."""
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)]


def docstring_lines(source: str) -> int:
    """How many lines the module docstring of ``source`` has (0: none)."""
    doc = ast.get_docstring(ast.parse(source), clean=True)
    return len(doc.strip().splitlines()) if doc else 0


def files(paths: list[str]) -> list[Path]:
    """git's files (tracked, or new and not ignored) under ``paths`` (git pathspecs: ``:!x``
    leaves x out); outside a git checkout, the files under them, ``:!x`` leaving x out."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                              "--", *paths], capture_output=True, text=True, check=True).stdout
        names = out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        left_out = tuple(p[2:].rstrip("/") + "/" for p in paths if p.startswith(":!"))
        names = [str(f) for p in paths if not p.startswith(":!") for f in Path(p).rglob("*")
                 if not str(f).startswith(left_out) and "__pycache__" not in f.parts]
    return [Path(f) for f in names
            if f.endswith(SUFFIXES) and not any(s in f for s in SKIP) and Path(f).is_file()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["."])
    parser.add_argument("--docstrings", type=int, metavar="N",
                        help="list module docstrings longer than N lines instead")
    args = parser.parse_args(argv)
    if args.docstrings is not None:
        long = []
        for path in files(args.paths):
            if path.suffix in (".py", ".pyi"):
                n = docstring_lines(path.read_text())
                if n > args.docstrings:
                    long.append((n, path))
        for n, path in sorted(long, key=lambda r: (-r[0], str(r[1]))):
            print(f"{path}: a module docstring of {n} lines")
        if long:
            print(f"{len(long)} module docstring(s) longer than {args.docstrings} lines: state the "
                  "contract, move the mechanism to docs/ (docs/development.md, 'House rules')")
        return 1 if long else 0
    found = 0
    for path in files(args.paths):
        for n, line in issue_numbers(path.read_text()):
            found += 1
            print(f"{path}:{n}: an issue number: {line.strip()}")
    if found:
        print(f"{found} line(s) name an issue number: say what the code does instead "
              "(docs/development.md, 'House rules')")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
