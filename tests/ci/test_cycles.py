"""The import-cycle finder of `make lint` (.ci/cycles.py): cycles as tables, and a package on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load

cycles = load("cycles")


@pytest.mark.parametrize(("edges", "expected"), [
    ({}, []),
    ({"a": ["b"], "b": ["c"]}, []),
    ({"a": ["b"], "b": ["a"]}, [["a", "b"]]),
    ({"a": ["a"]}, [["a"]]),
    ({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}, [["a", "b", "c"]]),
    # two cycles apart, joined by a one-way import
    ({"a": ["b"], "b": ["a", "c"], "c": ["d"], "d": ["c"]}, [["a", "b"], ["c", "d"]]),
    # a diamond is no cycle
    ({"a": ["b", "c"], "b": ["d"], "c": ["d"]}, []),
    # the client's old pair, TYPE_CHECKING edge included, beside modules outside it
    ({"client.client": ["client.consumer", "client.errors"],
      "client.consumer": ["client.client", "client.errors"], "client.errors": []},
     [["client.client", "client.consumer"]]),
    # a module importing nothing named only as a target
    ({"a": ["z"], "b": ["a"]}, []),
])
def test_strongly_connected(edges: dict[str, list[str]], expected: list[list[str]]) -> None:
    assert cycles.strongly_connected(edges) == expected


def test_strongly_connected_long_chain_needs_no_recursion() -> None:
    n = 5000
    edges = {f"m{i:05}": [f"m{i + 1:05}"] for i in range(n)}
    edges[f"m{n:05}"] = ["m00000"]
    assert cycles.strongly_connected(edges) == [sorted(edges)]


@pytest.mark.parametrize(("edges", "component", "expected"), [
    ({"a": ["b"], "b": ["a"]}, ["a", "b"], ["a", "b", "a"]),
    ({"a": ["a"]}, ["a"], ["a", "a"]),
    # the shortest way back, not the first found
    ({"a": ["b", "d"], "b": ["c"], "c": ["a"], "d": ["a"]}, ["a", "b", "c", "d"], ["a", "d", "a"]),
    # a way out of the component is not taken
    ({"a": ["x", "b"], "x": ["a"], "b": ["c"], "c": ["a"]}, ["a", "b", "c"], ["a", "b", "c", "a"]),
])
def test_one_cycle(edges: dict[str, list[str]], component: list[str], expected: list[str]) -> None:
    assert cycles.one_cycle(edges, component) == expected


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_package_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    _package(tmp_path, {
        "cyc_pkg/__init__.py": "",
        "cyc_pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n",
        "cyc_pkg/b.py": "def f():\n    from . import a\n",
        "cyc_pkg/c.py": "from . import a\n",
        "cyc_pkg/loose/d.py": "",  # no __init__.py: not in the graph
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles.main(["cyc_pkg"]) == 1
    out = capsys.readouterr().out
    assert "import cycle among 2 modules: cyc_pkg.a, cyc_pkg.b" in out
    assert "cyc_pkg.a -> cyc_pkg.b  (line 3: from . import b)" in out
    assert "cyc_pkg.b -> cyc_pkg.a  (line 2: from . import a)" in out
    assert "cyc_pkg.loose.d: not in the import graph" in out
    assert "cyc_pkg.c" not in out
    assert "2 problem(s)" in out


def test_a_clean_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    _package(tmp_path, {"clean_pkg/__init__.py": "", "clean_pkg/a.py": "from . import b\n",
                        "clean_pkg/b.py": "", "clean_pkg/sub/__init__.py": "from .. import a\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles.main(["clean_pkg"]) == 0
    assert capsys.readouterr().out == ""
