"""The house rules `make lint` checks (.ci/house_rules.py): issue numbers found or not, as a table
(``<n>`` stands for a number, so that the table itself names none), and module docstrings
measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load

rules = load("house_rules")


@pytest.mark.parametrize(("line", "found"), [
    ("x = 1  # issue <n>", True),
    ('"""Issue <n>: descriptors are bounded."""', True),
    ("# issues <n> and <n>", True),
    ("# see issue #<n>", True),
    ("# fixed in (#<n>)", True),
    ("#<n> broke it", True),
    ("x = 1  # the 12th issue", False),
    ("# an issue with 12 brokers", False),
    ("# osiris#<n>: what follows is gone", False),
    ("# (Strimzi #<n>)", False),
    ("# fixed in rabbitmq-server PR #<n>", False),
    ("colour = '#123456'", False),
    ("x = y  # noqa: E501", False),
    ("reissue 3 frames", False),
])
def test_issue_numbers(line: str, found: bool) -> None:
    assert bool(rules.issue_numbers(line.replace("<n>", "12"))) is found


def test_issue_numbers_gives_line_numbers() -> None:
    one, two = "# issue" + " 3", "# issue" + " 4"  # written so, this line names none
    assert rules.issue_numbers(f"a\n{one}\nb\n{two}\n") == [(2, one), (4, two)]


@pytest.mark.parametrize(("source", "lines"), [
    ("x = 1\n", 0),
    ('"""One line."""\n', 1),
    ('"""One.\n\nThree lines.\n"""\n', 3),
    ('"""\n    Indented,\n    two lines.\n    """\n', 2),
    ('# a comment first\n"""Still the docstring."""\n', 1),
])
def test_docstring_lines(source: str, lines: int) -> None:
    assert rules.docstring_lines(source) == lines


def test_files_without_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pkg/a.py", "pkg/b.txt", "pkg/gen/fbs/c.py", "pkg/__pycache__/d.py",
                 "pkg/bench/e.py", "pkg/f.c"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    monkeypatch.chdir(tmp_path)

    def no_git(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")  # as where git is not installed

    monkeypatch.setattr(rules.subprocess, "run", no_git)
    found = sorted(str(f) for f in rules.files(["pkg", ":!pkg/bench"]))
    assert found == ["pkg/a.py", "pkg/f.c"]


def test_long_docstrings_fail_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "short.py").write_text('"""One.\n\nThree lines.\n"""\n')
    (tmp_path / "long.py").write_text('"""' + "\n".join(["line"] * 4) + '\n"""\n')
    monkeypatch.chdir(tmp_path)

    def no_git(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")  # the files under ".", not git's

    monkeypatch.setattr(rules.subprocess, "run", no_git)
    assert rules.main(["--docstrings", "4", "."]) == 0
    assert rules.main(["--docstrings", "3", "."]) == 1
    out = capsys.readouterr().out
    assert "long.py: a module docstring of 4 lines" in out and "short.py" not in out
