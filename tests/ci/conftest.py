"""The .ci/ checks as modules: .ci is no package (its name starts with a dot)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

CI = Path(__file__).resolve().parents[2] / ".ci"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"ci_{name}", CI / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
