"""Authorization and TLS, operator side: the Broker schema's new fields, the cert-manager
example, how the operator connects to TLS brokers and what an export user may do."""

from __future__ import annotations

import base64
import re
from typing import Any

import jsonschema
import pytest
import yaml

from streamlet.broker.config import model
from streamlet_operator.brokers import BrokerUnavailable, ClientTls, operator_tls
from streamlet_operator.builders.configmap import render_config
from streamlet_operator.builders.export import (
    ExportSpec,
    build_export_cronjob,
    build_export_user_secret,
    export_connection,
    export_permission,
    export_secret_name,
    spark_submit_command,
)
from streamlet_operator.model import BrokerModel, StreamModel
from tests.chart.conftest import EXAMPLES, crd_schema
from tests.chart.schema import validate

EXAMPLE = EXAMPLES / "cert-manager-mtls.yaml"


def _broker(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
            "metadata": {"name": "b"}, "spec": spec}


@pytest.mark.parametrize("spec", [
    {"vhosts": ["team-a", "team-b"]},
    {"permissions": [{"user": "app"}, {"user": "app", "vhost": "x", "configure": "",
                                       "write": "^a$", "read": ".*"}]},
    {"tls": {"secretName": "t", "caSecretName": "ca", "verifyPeer": True,
             "plainListener": False, "operatorClientSecret": "op"}},
], ids=["vhosts", "permissions", "mtls-only"])
def test_the_schema_accepts(spec: dict[str, Any]) -> None:
    validate(_broker(spec), crd_schema("Broker"))


@pytest.mark.parametrize(("spec", "problem"), [
    ({"vhosts": [""]}, "minLength"),
    ({"vhosts": "team-a"}, "not of type 'array'"),
    ({"permissions": [{"vhost": "/"}]}, "'user' is a required property"),
    ({"permissions": [{"user": "app", "admin": True}]}, "admin"),
    ({"permissions": [{"user": "app", "read": 1}]}, "not of type 'string'"),
    ({"tls": {"secretName": "t", "verifyPeer": "yes"}}, "not of type 'boolean'"),
    ({"tls": {"secretName": "t", "plainListener": "off"}}, "not of type 'boolean'"),
    ({"tls": {"caSecretName": "ca"}}, "'secretName' is a required property"),
    ({"tls": {"secretName": "t", "operatorClientSecret": ""}}, "minLength"),
])
def test_the_schema_rejects(spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as info:
        validate(_broker(spec), crd_schema("Broker"))
    assert problem in str(info.value)


def _rules() -> list[str]:
    """The CEL rules this feature adds (the API server runs them; here: they are there)."""
    spec = crd_schema("Broker")["properties"]["spec"]
    rules = [r["rule"] for r in spec.get("x-kubernetes-validations", [])]
    return rules + [r["rule"] for r in spec["properties"]["tls"]["x-kubernetes-validations"]]


def test_cross_field_rules_are_in_the_schema() -> None:
    rules = " ".join(_rules())
    assert "self.verifyPeer || has(self.operatorClientSecret)" in rules
    assert "p.vhost in self.vhosts" in rules
    # TLS only with replicated streams is allowed: the brokers replicate over TLS
    assert "defaultReplicas" not in rules


def _example() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(EXAMPLE.read_text()))


def test_the_cert_manager_example_fits_together() -> None:
    """The Broker validates against the CRD; its Secrets are the Certificates' secretNames;
    the brokers' certificate names every pod as the operator and clients reach them."""
    objs = _example()
    (broker_doc,) = [o for o in objs if o["kind"] == "Broker"]
    validate(broker_doc, crd_schema("Broker"))
    model = BrokerModel.from_body(broker_doc)
    assert model.tls is not None and model.tls.verify_peer and not model.tls.plain_listener
    certificates = {o["spec"]["secretName"]: o for o in objs if o["kind"] == "Certificate"}
    issuers = {o["metadata"]["name"] for o in objs if o["kind"] == "Issuer"}
    for cert in certificates.values():
        assert cert["apiVersion"] == "cert-manager.io/v1"
        assert cert["spec"]["issuerRef"]["name"] in issuers
    server = certificates[model.tls.secret]
    ns = broker_doc["metadata"]["namespace"]
    assert f"*.{model.name}-headless.{ns}.svc" in server["spec"]["dnsNames"]
    assert f"*.{model.name}-headless.{ns}.svc.cluster.local" in server["spec"]["dnsNames"]
    assert "server auth" in server["spec"]["usages"]
    # the brokers present it to each other on their replication links (mutual TLS)
    assert "client auth" in server["spec"]["usages"]
    client = certificates[model.tls.operator_client_secret or ""]
    assert client["spec"]["commonName"] == "streamlet-operator"
    assert "client auth" in client["spec"]["usages"]
    # the Secrets' ca.crt comes from the one CA every Certificate is issued by
    assert {c["spec"]["issuerRef"]["name"] for n, c in certificates.items()
            if not c["spec"].get("isCA")} == {"streamlet-ca"}
    # and what the brokers are told parses
    assert "verify_peer = true" in render_config(model)
    # the Stream's export: over TLS with a client certificate of its own, issued by the CA
    (stream_doc,) = [o for o in objs if o["kind"] == "Stream"]
    validate(stream_doc, crd_schema("Stream"))
    export = ExportSpec.from_stream(stream_doc)
    assert export is not None
    connection = export_connection(export, model, ca_known=True)
    assert connection.port == model.tls.port and connection.tls is not None
    own = certificates[connection.tls.client_secret or ""]
    assert own is not client and "client auth" in own["spec"]["usages"]


def _secret(**data: str) -> dict[str, Any]:
    return {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _tls(**tls: Any) -> BrokerModel:
    return BrokerModel.from_body({"metadata": {"name": "b"},
                                  "spec": {"tls": {"secretName": "b-tls", **tls}}})


@pytest.mark.parametrize(("tls", "secrets", "expected"), [
    pytest.param(None, {}, None, id="no TLS: plaintext"),
    pytest.param({}, {"b-tls": _secret(**{"tls.crt": "C", "tls.key": "K"})}, None,
                 id="no CA known, plain listener on: plaintext as before"),
    pytest.param({}, {"b-tls": _secret(**{"ca.crt": "CA"})}, ClientTls("CA"),
                 id="cert-manager's ca.crt: TLS, verified"),
    pytest.param({"caSecretName": "ca"}, {"b-tls": _secret(**{"ca.crt": "X"}),
                                          "ca": _secret(**{"ca.crt": "CA"})}, ClientTls("CA"),
                 id="caSecretName over ca.crt"),
    pytest.param({"plainListener": False}, {"b-tls": _secret()}, ClientTls(),
                 id="TLS only without a CA: the system's CAs"),
    pytest.param({"verifyPeer": True, "operatorClientSecret": "op"},
                 {"b-tls": _secret(**{"ca.crt": "CA"}),
                  "op": _secret(**{"tls.crt": "C", "tls.key": "K"})},
                 ClientTls("CA", "C", "K"), id="mTLS: the operator's client certificate"),
])
def test_how_the_operator_connects(tls: dict[str, Any] | None,
                                   secrets: dict[str, dict[str, Any] | None],
                                   expected: ClientTls | None) -> None:
    model = (BrokerModel.from_body({"metadata": {"name": "b"}, "spec": {}}) if tls is None
             else _tls(**tls))
    assert operator_tls(model, secrets) == expected


def test_a_missing_operator_client_secret_is_said() -> None:
    with pytest.raises(BrokerUnavailable, match="operatorClientSecret 'op' not found"):
        operator_tls(_tls(verifyPeer=True, operatorClientSecret="op"),
                     {"b-tls": _secret(**{"ca.crt": "CA"})})


def _stream(resource: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": resource, "namespace": "n", "uid": "u1"},
            "spec": {"broker": "b", "export": {"schedule": "0 * * * *",
                                               "destination": "s3a://x/"}, **spec}}


@pytest.mark.parametrize(("body", "reads", "refused"), [
    pytest.param(_stream("orders"), ["orders"], ["orders-2", "xorders", "order", "other"],
                 id="one stream, whole name only"),
    pytest.param(_stream("r", name="a.b+c"), ["a.b+c"], ["aXb+c", "a.bbc", "a.b+c-0"],
                 id="regex-escaped"),
    pytest.param(_stream("inv", partitions=3), ["inv", "inv-0", "inv-2"], ["inv-3", "inv-10"],
                 id="a super stream's partitions"),
])
def test_an_export_user_reads_its_stream_only(body: dict[str, Any], reads: list[str],
                                               refused: list[str]) -> None:
    permission = export_permission(StreamModel.from_body(body))
    assert permission.user == f"streamlet-export-{body['metadata']['name']}"
    assert (permission.configure, permission.write, permission.vhost) == ("", "", "/")
    for name in reads:  # searched, as the broker does (access.py)
        assert re.search(permission.read, name), name
    for name in refused:
        assert not re.search(permission.read, name), name
    model.Permission(permission.user, permission.vhost)  # the broker's fields, same names


def test_export_jobs_run_as_the_export_user() -> None:
    body = _stream("orders")
    stream = StreamModel.from_body(body)
    secret = build_export_user_secret(body, "pw")
    assert secret["metadata"]["name"] == export_secret_name(stream) == "orders-export-user"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert base64.b64decode(secret["data"]["user"]).decode() == "streamlet-export-orders"
    cronjob = build_export_cronjob(body)
    assert cronjob is not None
    env = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["valueFrom"]["secretKeyRef"] for e in env] == [
        {"name": "orders-export-user", "key": "user"},
        {"name": "orders-export-user", "key": "password"}]
    export = ExportSpec.from_stream(body)
    assert export is not None
    command = " ".join(spark_submit_command(stream, export))
    assert "secretKeyRef.STREAMLET_USER=orders-export-user:user" in command
    assert "b-operator" not in command  # never the operator's credentials
