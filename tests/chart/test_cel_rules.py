"""The CRDs' CEL rules (x-kubernetes-validations), evaluated by a CEL implementation (celpy)
the way the API server runs them: after defaulting, each rule at its node with ``self`` that
node, only where the node is present; a transition rule (one naming ``oldSelf``) only on an
update, and only where the node is present in the old object too.

Every rule has table cases: an object it must admit and one it must refuse; a rule added to a
CRD without any fails test_every_rule_has_cases_that_pass_and_fail.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import celpy
import pytest

from tests.chart.conftest import crd_schema

KINDS = ("Broker", "Stream")


@dataclass(frozen=True)
class Rule:
    kind: str
    path: str
    rule: str
    message: str

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.rule


def _rules_at(kind: str, node: dict[str, Any], path: str) -> Iterator[Rule]:
    for item in node.get("x-kubernetes-validations") or []:
        yield Rule(kind, path, item["rule"], item.get("message", ""))
    for name, child in (node.get("properties") or {}).items():
        yield from _rules_at(kind, child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _rules_at(kind, node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _rules_at(kind, node["additionalProperties"], f"{path}{{}}")


def crd_rules() -> list[Rule]:
    return [r for kind in KINDS for r in _rules_at(kind, crd_schema(kind), "")]


def defaulted(schema: dict[str, Any], value: Any) -> Any:
    """``value`` with the schema's defaults filled in, as the API server stores it."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, child in schema["properties"].items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = defaulted(child, out[name])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [defaulted(schema["items"], v) for v in value]
    return value


_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(rule: str) -> Any:
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule))
    return _PROGRAMS[rule]


_ABSENT = object()


def _evaluate(kind: str, schema: dict[str, Any], new: Any, old: Any, path: str,
              seen: list[tuple[Rule, bool]]) -> None:
    for item in schema.get("x-kubernetes-validations") or []:
        rule = Rule(kind, path, item["rule"], item.get("message", ""))
        if rule.transition and old is _ABSENT:
            continue  # a create, or a node the old object did not have: the rule does not run
        activation = {"self": celpy.json_to_cel(new)}
        if rule.transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = _program(rule.rule).evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{rule}: {result!r}"
        seen.append((rule, bool(result)))
    if isinstance(new, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in new:  # absent in the new object: its rules do not run
                older = old.get(name, _ABSENT) if isinstance(old, dict) else _ABSENT
                _evaluate(kind, child, new[name], older, f"{path}.{name}", seen)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, value in new.items():
                older = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
                _evaluate(kind, extra, value, older, f"{path}{{}}", seen)
    if isinstance(new, list) and isinstance(schema.get("items"), dict):
        for value in new:  # no list-map correlation in these CRDs: items' rules without oldSelf
            _evaluate(kind, schema["items"], value, _ABSENT, f"{path}[]", seen)


def run_rules(kind: str, spec: dict[str, Any],
              old_spec: dict[str, Any] | None = None) -> list[tuple[Rule, bool]]:
    """Each rule the API server would run on this create (or update of ``old_spec``)."""
    schema = crd_schema(kind)
    new = defaulted(schema, {"apiVersion": "streamlet.dev/v1alpha1", "kind": kind,
                             "metadata": {"name": "x"}, "spec": spec})
    old: Any = _ABSENT
    if old_spec is not None:
        old = defaulted(schema, {"apiVersion": "streamlet.dev/v1alpha1", "kind": kind,
                                 "metadata": {"name": "x"}, "spec": old_spec})
    seen: list[tuple[Rule, bool]] = []
    _evaluate(kind, schema, new, old, "", seen)
    return seen


def refused(kind: str, spec: dict[str, Any], old_spec: dict[str, Any] | None = None) -> set[str]:
    """The messages of the rules refusing the object."""
    return {rule.message for rule, ok in run_rules(kind, spec, old_spec) if not ok}


@dataclass(frozen=True)
class Case:
    kind: str
    spec: dict[str, Any]
    old: dict[str, Any] | None = None
    #: the messages the API server answers with; empty: admitted
    refused: frozenset[str] = field(default_factory=frozenset)


STREAM = {"broker": "events"}
STORAGE = "storage.storageClassName is immutable (a volume keeps its class)"
VHOSTS = 'every permissions[].vhost must be "/" or one of spec.vhosts'
CLIENT_CERT = "tls.verifyPeer needs tls.operatorClientSecret (the operator's client certificate)"
TEMPLATE = "advertise.hostTemplate is required with mode Template"


def _refuses(*messages: str) -> frozenset[str]:
    return frozenset(messages)


def _stream_immutability(name: str, value: Any, other: Any) -> dict[str, Case]:
    """An immutable optional Stream field: kept, changed, removed, added on update."""
    message = f"{name} is immutable"
    return {
        f"stream-{name}-set-on-create": Case("Stream", {**STREAM, name: value}),
        f"stream-{name}-kept": Case("Stream", {**STREAM, name: value}, {**STREAM, name: value}),
        f"stream-{name}-changed": Case("Stream", {**STREAM, name: other}, {**STREAM, name: value},
                                       _refuses(message)),
        f"stream-{name}-removed": Case("Stream", dict(STREAM), {**STREAM, name: value},
                                       _refuses(message)),
        f"stream-{name}-added": Case("Stream", {**STREAM, name: value}, dict(STREAM),
                                     _refuses(message)),
        f"stream-{name}-never-set": Case("Stream", dict(STREAM), dict(STREAM)),
    }


CASES: dict[str, Case] = {
    # Broker: storage (defaulted, so a removed storage comes back as the default). The size may
    # change here: the operator grows volumes and refuses a shrink (StorageResized), as CEL
    # without Kubernetes' quantity library cannot compare "50Gi" with "60Gi".
    "broker-create": Case("Broker", {}),
    "broker-storage-kept": Case("Broker", {"storage": {"size": "50Gi"}}, {"storage": {"size": "50Gi"}}),
    "broker-storage-grown": Case("Broker", {"storage": {"size": "60Gi"}},
                                 {"storage": {"size": "50Gi"}}),
    "broker-storage-removed": Case("Broker", {}, {"storage": {"size": "50Gi"}}),
    "broker-storage-class-changed": Case(
        "Broker", {"storage": {"size": "50Gi", "storageClassName": "slow"}},
        {"storage": {"size": "50Gi", "storageClassName": "fast"}}, _refuses(STORAGE)),
    "broker-storage-class-kept-size-grown": Case(
        "Broker", {"storage": {"size": "60Gi", "storageClassName": "fast"}},
        {"storage": {"size": "50Gi", "storageClassName": "fast"}}),
    "broker-storage-class-removed": Case(
        "Broker", {"storage": {"size": "50Gi"}},
        {"storage": {"size": "50Gi", "storageClassName": "fast"}}, _refuses(STORAGE)),
    "broker-storage-class-added": Case(
        "Broker", {"storage": {"size": "50Gi", "storageClassName": "fast"}},
        {"storage": {"size": "50Gi"}}, _refuses(STORAGE)),
    "broker-storage-default-spelled-out": Case("Broker", {"storage": {"size": "10Gi"}}, {}),
    "broker-other-fields-change": Case("Broker", {"replicas": 3}, {"replicas": 1}),
    # Broker: advertise
    "broker-advertise-template": Case("Broker", {"advertise": {
        "mode": "Template", "hostTemplate": "{pod}.example.com"}}),
    "broker-advertise-template-without-host": Case("Broker", {"advertise": {"mode": "Template"}},
                                                   refused=_refuses(TEMPLATE)),
    "broker-advertise-pod-ip": Case("Broker", {"advertise": {"mode": "PodIP"}}),
    # Broker: permissions name "/" or a declared vhost
    "broker-permissions-default-vhost": Case("Broker", {"permissions": [{"user": "app"}]}),
    "broker-permissions-declared-vhost": Case("Broker", {
        "vhosts": ["team-a"], "permissions": [{"user": "app", "vhost": "team-a"}]}),
    "broker-permissions-unknown-vhost": Case("Broker", {
        "vhosts": ["team-a"], "permissions": [{"user": "app", "vhost": "team-b"}]},
        refused=_refuses(VHOSTS)),
    "broker-permissions-no-vhosts": Case("Broker", {"permissions": [{"user": "a", "vhost": "x"}]},
                                         refused=_refuses(VHOSTS)),
    # Broker: TLS only, replicated too (the brokers replicate over TLS); mutual TLS needs the
    # operator's certificate
    "broker-tls-only": Case("Broker", {"tls": {"secretName": "t", "plainListener": False}}),
    "broker-tls-only-replicated": Case("Broker", {
        "tls": {"secretName": "t", "plainListener": False}, "streams": {"defaultReplicas": 3}}),
    "broker-tls-beside-plain-replicated": Case("Broker", {
        "tls": {"secretName": "t"}, "streams": {"defaultReplicas": 3}}),
    "broker-mtls": Case("Broker", {"tls": {"secretName": "t", "verifyPeer": True,
                                           "operatorClientSecret": "op"}}),
    "broker-mtls-without-client-cert": Case("Broker", {"tls": {"secretName": "t",
                                                               "verifyPeer": True}},
                                            refused=_refuses(CLIENT_CERT)),
    # Stream: required or defaulted immutable fields
    "stream-create": Case("Stream", dict(STREAM)),
    "stream-broker-changed": Case("Stream", {"broker": "other"}, dict(STREAM),
                                  _refuses("broker is immutable")),
    "stream-partitions-changed": Case("Stream", {**STREAM, "partitions": 3},
                                      {**STREAM, "partitions": 2},
                                      _refuses("partitions is immutable")),
    "stream-partitions-removed": Case("Stream", dict(STREAM), {**STREAM, "partitions": 3},
                                      _refuses("partitions is immutable")),
    "stream-partitions-default-spelled-out": Case("Stream", {**STREAM, "partitions": 1},
                                                  dict(STREAM)),
    # Stream: optional immutable fields, removal included
    **_stream_immutability("name", "orders", "orders-2"),
    # replicas changes (the operator adds or removes members), set, unset or changed
    "stream-replicas-changed": Case("Stream", {**STREAM, "replicas": 5}, {**STREAM, "replicas": 3}),
    "stream-replicas-removed": Case("Stream", dict(STREAM), {**STREAM, "replicas": 3}),
    "stream-replicas-added": Case("Stream", {**STREAM, "replicas": 3}, dict(STREAM)),
    **_stream_immutability("filterSizeBytes", 32, 64),
    # retention changes (the operator applies it live, as a policy), set, unset or changed
    "stream-retention-changed": Case("Stream", {**STREAM, "retention": {"maxAge": "8D"}},
                                     {**STREAM, "retention": {"maxAge": "7D"}}),
    "stream-retention-added": Case("Stream", {**STREAM, "retention": {"maxAge": "7D"}},
                                   dict(STREAM)),
    "stream-retention-removed": Case("Stream", dict(STREAM),
                                     {**STREAM, "retention": {"maxAge": "7D"}}),
    "stream-retention-field-removed": Case(
        "Stream", {**STREAM, "retention": {"maxAge": "7D"}},
        {**STREAM, "retention": {"maxAge": "7D", "maxLengthBytes": 1000}}),
    "stream-mutable-fields-change": Case(
        "Stream", {**STREAM, "deletionPolicy": "retain",
                   "export": {"schedule": "@daily", "destination": "/x"}}, dict(STREAM)),
    # Stream: replicas of a super stream
    "stream-super-one-copy": Case("Stream", {**STREAM, "partitions": 3, "replicas": 1}),
    "stream-super-replicated": Case("Stream", {**STREAM, "partitions": 3, "replicas": 3}),
    "stream-single-replicated": Case("Stream", {**STREAM, "replicas": 3}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_rule_table(case: Case) -> None:
    assert refused(case.kind, case.spec, case.old) == case.refused


def test_every_rule_compiles() -> None:
    for rule in crd_rules():
        _program(rule.rule)


def test_every_rule_has_cases_that_pass_and_fail() -> None:
    """A rule the table never runs, or never sees pass or never sees fail, is untested."""
    outcomes: dict[Rule, set[bool]] = {rule: set() for rule in crd_rules()}
    for case in CASES.values():
        for rule, ok in run_rules(case.kind, case.spec, case.old):
            outcomes[rule].add(ok)
    untested = [f"{r.kind}{r.path}: {r.rule} (seen: {sorted(seen)})"
                for r, seen in outcomes.items() if seen != {True, False}]
    assert untested == []


def test_a_rule_without_cases_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coverage test fails for a rule added to the CRD without table cases."""
    import tests.chart.test_cel_rules as this

    original = this.crd_schema
    schema = copy.deepcopy(original("Stream"))
    schema["properties"]["spec"]["properties"]["deletionPolicy"]["x-kubernetes-validations"] = [
        {"rule": "self != 'keep'", "message": "keep is spelled retain"}]
    monkeypatch.setattr(this, "crd_schema", lambda kind: schema if kind == "Stream"
                        else original(kind))
    with pytest.raises(AssertionError):
        test_every_rule_has_cases_that_pass_and_fail()


def test_removing_an_immutable_field_would_slip_past_a_rule_on_the_field() -> None:
    """Why the optional immutable fields' rules sit on spec: a transition rule on the field
    itself does not run when an update removes the field."""
    schema = {"type": "object", "properties": {"name": {
        "type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf",
                                                        "message": "name is immutable"}]}}}
    seen: list[tuple[Rule, bool]] = []
    _evaluate("Stream", schema, {}, {"name": "orders"}, "", seen)
    assert seen == []  # nothing ran: the removal slips through
    _evaluate("Stream", schema, {"name": "other"}, {"name": "orders"}, "", seen)
    assert [ok for _, ok in seen] == [False]
