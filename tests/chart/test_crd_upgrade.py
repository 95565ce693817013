"""Objects stored under an earlier revision of the CRDs still pass the current ones.

tests/fixtures/crds/<revision>/ holds that revision's two CRD files and Broker and Stream
objects valid against them, covering every field, its bounds and its enum values. Each object,
defaulted as that API server stored it, must pass the current openAPIV3Schema (nothing pruned:
no field dropped, none tightened) and the current CEL rules, on a create and on an update that
changes nothing (a status write, a label). So a CRD change that refuses what a cluster already
holds fails here. Which CRD changes are allowed: docs/upgrading.md.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.conftest import ROOT, crd_schema
from tests.chart.schema import validate
from tests.chart.test_cel_rules import _ABSENT, Rule, _evaluate, defaulted

FIXTURES = ROOT / "tests" / "fixtures" / "crds"
REVISIONS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
KINDS = {"Broker": ("streamlet.dev_brokers.yaml", "brokers.yaml"),
         "Stream": ("streamlet.dev_streams.yaml", "streams.yaml")}


def old_schema(revision: str, kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((FIXTURES / revision / KINDS[kind][0]).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def written(revision: str, kind: str) -> list[dict[str, Any]]:
    """The objects as they were written under ``revision`` (before its defaults)."""
    path: Path = FIXTURES / revision / KINDS[kind][1]
    return [o for o in yaml.safe_load_all(path.read_text()) if o]


def stored(revision: str, kind: str) -> list[dict[str, Any]]:
    """The objects as that revision's API server stored them: its defaults filled in."""
    schema = old_schema(revision, kind)
    return [defaulted(schema, obj) for obj in written(revision, kind)]


def refusals(kind: str, schema: dict[str, Any], obj: dict[str, Any],
             old: Any = _ABSENT) -> list[str]:
    """The messages of the CEL rules of ``schema`` that refuse ``obj`` (an update of ``old``)."""
    seen: list[tuple[Rule, bool]] = []
    _evaluate(kind, schema, obj, old, "", seen)
    return [f"{rule.path}: {rule.message}" for rule, ok in seen if not ok]


def check(kind: str, schema: dict[str, Any], obj: dict[str, Any]) -> None:
    """``obj``, read from storage by an API server with ``schema``, passes it: the schema (with
    pruning: an unknown field fails), and the CEL rules on a create and on an update that
    changes nothing. Raises jsonschema.ValidationError or AssertionError."""
    current = defaulted(schema, copy.deepcopy(obj))  # defaults are applied on read too
    validate(current, schema)
    assert refusals(kind, schema, current) == [], "refused on a create"
    assert refusals(kind, schema, current, copy.deepcopy(current)) == [], "refused on an update"


def _cases() -> list[Any]:
    return [pytest.param(revision, kind, obj["metadata"]["name"],
                         id=f"{revision}-{kind}-{obj['metadata']['name']}")
            for revision in REVISIONS for kind in KINDS for obj in written(revision, kind)]


def _stored_object(revision: str, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in stored(revision, kind) if o["metadata"]["name"] == name)


def test_there_is_a_revision() -> None:
    assert REVISIONS, f"no fixtures under {FIXTURES}"


@pytest.mark.parametrize("revision, kind, name", _cases())
def test_fixture_was_valid_under_its_revision(revision: str, kind: str, name: str) -> None:
    """What the fixtures hold is what that revision accepted."""
    schema = old_schema(revision, kind)
    obj = _stored_object(revision, kind, name)
    validate(obj, schema)
    assert refusals(kind, schema, obj) == []


@pytest.mark.parametrize("revision, kind, name", _cases())
def test_stored_object_passes_the_current_crd(revision: str, kind: str, name: str) -> None:
    check(kind, crd_schema(kind), _stored_object(revision, kind, name))


# --- the fixtures cover the revision's schema -------------------------------------------------

def _nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def _values(node: dict[str, Any], value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(schema path, value) for every node of ``value`` the schema describes."""
    yield path, value
    if isinstance(value, dict):
        for name, child in (node.get("properties") or {}).items():
            if name in value:
                yield from _values(child, value[name], f"{path}.{name}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                yield from _values(extra, item, f"{path}{{}}")
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            yield from _values(node["items"], item, f"{path}[]")


def uncovered(schema: dict[str, Any], objects: list[dict[str, Any]]) -> list[str]:
    """The fields of ``schema`` no object sets, and the bounds (minimum, maximum, minLength,
    maxLength) and enum values none uses: a tightening there would go unnoticed."""
    used: dict[str, list[Any]] = {}
    for obj in objects:
        for path, value in _values(schema, obj, ""):
            used.setdefault(path, []).append(value)
    missing = []
    for path, node in _nodes(schema, ""):
        if path.startswith(".metadata."):
            continue  # the API server's own
        values = used.get(path, [])
        if not values:
            missing.append(f"{path}: never set")
            continue
        for bound in ("minimum", "maximum"):
            if bound in node and node[bound] not in values:
                missing.append(f"{path}: never {bound} {node[bound]}")
        lengths = {len(v) for v in values if isinstance(v, str)}
        for bound in ("minLength", "maxLength"):
            if bound in node and node[bound] not in lengths:
                missing.append(f"{path}: no value of {bound} {node[bound]}")
        for choice in node.get("enum", ()):
            if choice not in values:
                missing.append(f"{path}: never {choice!r}")
    return missing


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_fixtures_cover_their_revision(revision: str, kind: str) -> None:
    assert uncovered(old_schema(revision, kind), stored(revision, kind)) == []


# --- the check fails on a CRD that drops or tightens a field ---------------------------------

def _drop_advertise_port(schema: dict[str, Any]) -> None:
    del schema["properties"]["spec"]["properties"]["advertise"]["properties"]["port"]


def _lower_replicas_maximum(schema: dict[str, Any]) -> None:
    schema["properties"]["spec"]["properties"]["replicas"]["maximum"] = 5


def _drop_retain(schema: dict[str, Any]) -> None:
    schema["properties"]["spec"]["properties"]["deletionPolicy"]["enum"] = ["delete"]


def _shorter_user_names(schema: dict[str, Any]) -> None:
    permissions = schema["properties"]["spec"]["properties"]["permissions"]
    permissions["items"]["properties"]["user"]["maxLength"] = 64


def _rule_against_large_filters(schema: dict[str, Any]) -> None:
    schema["properties"]["spec"].setdefault("x-kubernetes-validations", []).append(
        {"rule": "!has(self.filterSizeBytes) || self.filterSizeBytes < 255",
         "message": "filterSizeBytes below 255"})


def _new_rule_on_unchanged_update(schema: dict[str, Any]) -> None:
    schema["properties"]["spec"].setdefault("x-kubernetes-validations", []).append(
        {"rule": "!has(self.replicas) || self.replicas != oldSelf.replicas",
         "message": "an update must change replicas"})


def _drop_status_field(schema: dict[str, Any]) -> None:
    del schema["properties"]["status"]["properties"]["replication"]["properties"]["inSync"]


@pytest.mark.parametrize("kind, change", [
    ("Broker", _drop_advertise_port),
    ("Stream", _lower_replicas_maximum),
    ("Stream", _drop_retain),
    ("Broker", _shorter_user_names),
    ("Stream", _rule_against_large_filters),
    ("Stream", _new_rule_on_unchanged_update),
    ("Stream", _drop_status_field),
], ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_a_crd_that_refuses_stored_objects_fails(
        kind: str, change: Callable[[dict[str, Any]], None]) -> None:
    schema = crd_schema(kind)
    change(schema)
    failures = []
    for revision in REVISIONS:
        for obj in stored(revision, kind):
            try:
                check(kind, schema, obj)
            except (jsonschema.ValidationError, AssertionError) as e:
                failures.append(f"{obj['metadata']['name']}: {str(e).splitlines()[0]}")
    assert failures, f"{change.__name__}: no stored {kind} refused"
