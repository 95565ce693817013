"""Each C module has a .pyi stub beside its source naming exactly the functions the C module
defines, and mypy (make lint) checks each Python twin against its stub: the assignments under
TYPE_CHECKING below fail to type-check when a twin and its C function part ways."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streamlet import native

if TYPE_CHECKING:  # read by mypy only: a twin is assignable where its C function is
    from streamlet.mega import _runs as _mega_runs
    from streamlet.mega import runs as mega_runs
    from streamlet.rsio import _runs, runs
    from streamlet.sbp import _flat, flat
    from streamlet.storage import _entries, entries
    from streamlet.wire import _arena

    _make_arena = _arena.arena
    _make_arena = bytearray
    _cut = _entries.cut_simple
    _cut = entries._cut_python
    _join = _entries.join_simple
    _join = entries._join_python
    _ids = _entries.consecutive_ids
    _ids = entries._ids_python
    _prefix = _entries.simple_prefix
    _prefix = entries._prefix_python
    _fill_append = _flat.fill_append
    _fill_append = flat._fill_append
    _fill_fetch = _flat.fill_fetch
    _fill_fetch = flat._fill_fetch
    _on_next_run = _runs.on_next_run
    _on_next_run = runs._run_python
    _cut_on_next = _runs.cut_on_next
    _cut_on_next = runs._cut_python
    _produce_run = _mega_runs.produce_run
    _produce_run = mega_runs._produce_run_python
    _consume_run = _mega_runs.consume_run
    _consume_run = mega_runs._consume_run_python
    _produced = _mega_runs.produced_answers
    _produced = mega_runs._produced_python
    _consumed = _mega_runs.consumed_answers
    _consumed = mega_runs._consumed_python
    _positions = _mega_runs.simple_positions
    _positions = mega_runs._positions_python
    # rabbitmq/publish.py builds PublishBatch(*_speedups.split_publish_v1(body)): checked there

PACKAGE = Path(native.__file__).parent


def _source(module: str, suffix: str) -> Path:
    return PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(suffix)


def _stubbed(module: str) -> set[str]:
    tree = ast.parse(_source(module, ".pyi").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("module", native.MODULES)
def test_a_stub_names_what_the_c_source_defines(module: str) -> None:
    methods = set(re.findall(r'\{"(\w+)",\s*\w+,\s*METH_', _source(module, ".c").read_text()))
    assert methods, f"no PyMethodDef entries read from {module}'s C source"
    assert _stubbed(module) == methods


@pytest.mark.parametrize("module", native.MODULES)
def test_a_stub_names_what_the_built_module_exports(module: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.ENV, raising=False)
    try:
        built = importlib.import_module(module)
    except ImportError:
        pytest.skip(f"{module} is not built here")
    exported = {name for name in dir(built) if not name.startswith("_")}
    assert _stubbed(module) == exported
