"""The chart's monitoring objects (monitoring-*.yaml): rendered by Helm's library; the Grafana
ConfigMap validated by Kubernetes' schemas. The Prometheus Operator's kinds (PodMonitor,
ServiceMonitor, PrometheusRule) are not in those schemas: their structure is checked against
the fields of monitoring.coreos.com/v1 they use (below, no unknown field), and their selectors
and ports against the StatefulSet and Services the operator builds. Every metric the alert
rules and the dashboard name exists in a real scrape of a broker process (the replication
metrics: of a replicated stream's leader)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml
from rstream import Consumer, Producer, RawMessage

from streamlet.broker.config import environment
from streamlet.broker.protocols import load
from streamlet_operator import names
from streamlet_operator.builders import build_all
from streamlet_operator.builders.configmap import METRICS_PORT
from tests.broker.test_replication import assign
from tests.broker.test_replication_metrics import replicated_cluster
from tests.chart.conftest import CHART, KUBE_VERSIONS
from tests.chart.test_builders import _mounted, broker
from tests.support.brokers import BrokerProcess, free_port
from tests.support.scrape import parse, scrape
from tests.support.waiting import eventually

helm_python.disable_logging()

ALL_ON = {"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}},
                         "serviceMonitor": {"enabled": True},
                         "prometheusRule": {"enabled": True},
                         "dashboard": {"enabled": True}}}
MONITORING_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule")


def render(chart: helm_python.Chart, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """kind -> the one object of that kind among the monitoring templates' output."""
    out = chart.render(values, name="streamlet", namespace="streamlet-system", is_install=True)
    docs = [d for path, text in sorted(out.items()) if "/monitoring-" in path
            for d in yaml.safe_load_all(text) if d]
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds))
    return {d["kind"]: d for d in docs}


# --- the fields of monitoring.coreos.com/v1 these templates use --------------------------------

def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required),
            "additionalProperties": False}


STRING = {"type": "string"}
LABELS = {"type": "object", "additionalProperties": STRING}
DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
                                         "(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
METADATA = _obj({"name": STRING, "namespace": STRING, "labels": LABELS}, ("name", "namespace"))
SELECTOR = _obj({"matchLabels": LABELS})
NAMESPACES = _obj({"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": STRING}})
SECRET_KEY = _obj({"name": STRING, "key": STRING}, ("key",))
SAFE_TLS = _obj({"ca": _obj({"secret": SECRET_KEY}), "serverName": STRING,
                 "insecureSkipVerify": {"type": "boolean"}})
ENDPOINT = _obj({"port": STRING, "path": STRING, "interval": DURATION,
                 "scheme": {"enum": ["http", "https"]}, "tlsConfig": SAFE_TLS}, ("port",))
RULE = _obj({"alert": STRING, "expr": STRING, "for": DURATION, "labels": LABELS,
             "annotations": LABELS}, ("alert", "expr"))


def _kind(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _obj({"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": kind},
                 "metadata": METADATA, "spec": spec}, ("apiVersion", "kind", "metadata", "spec"))


SCHEMAS = {
    "PodMonitor": _kind("PodMonitor", _obj({
        "jobLabel": STRING, "selector": SELECTOR, "namespaceSelector": NAMESPACES,
        "podMetricsEndpoints": {"type": "array", "items": ENDPOINT, "minItems": 1}},
        ("selector", "podMetricsEndpoints"))),
    "ServiceMonitor": _kind("ServiceMonitor", _obj({
        "jobLabel": STRING, "selector": SELECTOR, "namespaceSelector": NAMESPACES,
        "endpoints": {"type": "array", "items": ENDPOINT, "minItems": 1}},
        ("selector", "endpoints"))),
    "PrometheusRule": _kind("PrometheusRule", _obj({"groups": {"type": "array", "items": _obj({
        "name": STRING, "rules": {"type": "array", "items": RULE, "minItems": 1}},
        ("name", "rules"))}}, ("groups",))),
}


# --- metric names in PromQL --------------------------------------------------------------------

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions (a
    '(' follows), keywords, label names (in {...} and by/without/on/ignoring (...)), ranges,
    strings, numbers or Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    found = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?!\w)", text):
        name = m.group(1)
        if re.match(r"\s*\(", text[m.end():]) or name.lower() in KEYWORDS:
            continue
        if re.search(r"[0-9.]$", text[: m.start()]):  # 1e3, 24h: part of a number
            continue
        found.add(name)
    return found


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('sum by (protocol) (rate(a_total{job="x", y=~"$v"}[5m])) / b') == {
        "a_total", "b"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))"
                        ) == {"h_bucket"}
    assert metric_names("x > 10000 and deriv(y[15m]) > 0 or predict_linear(z[6h], 24 * 3600) < 0"
                        ) == {"x", "y", "z"}


def rule_exprs(rules: dict[str, Any]) -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]}


def dashboard(cm: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(cm["data"]["streamlet.json"]))


def dashboard_names(dash: dict[str, Any]) -> set[str]:
    names_: set[str] = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names_ |= metric_names(target["expr"])
    for variable in dash["templating"]["list"]:
        if variable["type"] == "query":  # label_values(metric{...}, label)
            m = re.match(r"label_values\((\w+)", variable["query"]["query"])
            assert m, variable
            names_.add(m.group(1))
    return names_


# --- the tests -----------------------------------------------------------------------------------

def test_off_by_default(chart: helm_python.Chart) -> None:
    assert render(chart, {}) == {}
    for key in ("podMonitor", "serviceMonitor", "prometheusRule", "dashboard"):
        only = render(chart, {"monitoring": {key: {"enabled": True}}})
        assert len(only) == 1, key


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_rendered_objects_are_valid(chart: helm_python.Chart, version: str) -> None:
    docs = render(chart, ALL_ON)
    assert sorted(docs) == ["ConfigMap", *sorted(MONITORING_KINDS)]
    kubernetes_validate.validate(docs["ConfigMap"], version, strict=True)
    for kind in MONITORING_KINDS:
        jsonschema.validate(docs[kind], SCHEMAS[kind], cls=jsonschema.Draft7Validator)
    assert docs["PodMonitor"]["metadata"]["labels"]["release"] == "kps"


def test_lint_is_clean() -> None:
    result = helm_python.lint(CHART, ALL_ON, strict=True, kube_version="1.30.0", quiet=True)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("bad", [{"podMonitor": {"interval": "soon"}},
                                 {"podMonitor": {"scheme": "tls"}},
                                 {"serviceMonitor": {"tlsConfig": {"ca": "x"}}},
                                 {"serviceMonitor": {"tlsConfig": {"caKey": ""}}},
                                 {"prometheusRule": {"diskFreeRatio": 2}},
                                 {"dashboard": {"enable": True}}])
def test_values_schema_refuses(bad: dict[str, Any]) -> None:
    result = helm_python.lint(CHART, {"monitoring": bad}, strict=True, kube_version="1.30.0",
                              quiet=True)
    assert result["errors"] or [m for m in result["messages"] if m["severity"] >= 2]


def test_monitors_find_the_pods_and_services_the_operator_builds(
        chart: helm_python.Chart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(chart, {**ALL_ON, "operator": {"watchNamespaces": ["prod"]}})
    built = {m["kind"] + "/" + m["metadata"]["name"]: m for m in build_all(broker(), 2, {})}
    sts = built["StatefulSet/events"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    [container] = sts["spec"]["template"]["spec"]["containers"]
    headless, client = built["Service/events-headless"], built["Service/events"]
    for monitor, endpoints in (("PodMonitor", "podMetricsEndpoints"),
                               ("ServiceMonitor", "endpoints")):
        spec = docs[monitor]["spec"]
        assert spec["namespaceSelector"] == {"matchNames": ["prod"]}
        [endpoint] = spec[endpoints]
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        selected = spec["selector"]["matchLabels"]
        target = pod_labels if monitor == "PodMonitor" else headless["metadata"]["labels"]
        assert selected.items() <= target.items()
        # job="streamlet-broker", which the rules and the dashboard select
        assert target[spec["jobLabel"]] == "streamlet-broker"
    assert {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"} in container["ports"]
    assert {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics",
            "protocol": "TCP"} in headless["spec"]["ports"]
    assert all(p["name"] != "metrics" for p in client["spec"]["ports"]), \
        "one scrape per pod: the client Service would reach any pod"
    # the broker in the pod serves them there: the operator's config, read by the broker
    monkeypatch.delenv("STREAMLET_MEMBER", raising=False)
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "events-1")
    cfg = load(_mounted(tmp_path, broker(), {"u": "p"}))
    assert cfg.metrics is not None and cfg.metrics.port == METRICS_PORT
    assert (cfg.metrics.host or cfg.host) == "0.0.0.0"
    assert names.selector("events").items() <= pod_labels.items()


@pytest.mark.parametrize(("tls", "want"), [
    pytest.param({"caSecret": "streamlet-ca", "serverName": "events.prod.svc"},
                 {"ca": {"secret": {"name": "streamlet-ca", "key": "ca.crt"}},
                  "serverName": "events.prod.svc", "insecureSkipVerify": False},
                 id="the CA from a Secret, a name every certificate carries"),
    pytest.param({"caSecret": "ca", "caKey": "tls-ca.pem"},
                 {"ca": {"secret": {"name": "ca", "key": "tls-ca.pem"}},
                  "insecureSkipVerify": False}, id="another key"),
    pytest.param({"insecureSkipVerify": True}, {"insecureSkipVerify": True}, id="no check"),
])
def test_monitors_scrape_over_https(chart: helm_python.Chart, tls: dict[str, Any],
                                    want: dict[str, Any]) -> None:
    """scheme https: the port metrics-tls that a Broker with TLS has on its pods and headless
    Service (spec.tls.metrics, on by default), with the tlsConfig asked for; http (the default)
    keeps metrics and no tlsConfig."""
    docs = render(chart, {"monitoring": {
        "podMonitor": {"enabled": True, "scheme": "https", "tlsConfig": tls},
        "serviceMonitor": {"enabled": True, "scheme": "https", "tlsConfig": tls}}})
    built = {m["kind"] + "/" + m["metadata"]["name"]: m
             for m in build_all(broker(tls={"secretName": "events-tls"}), 1, {})}
    [container] = built["StatefulSet/events"]["spec"]["template"]["spec"]["containers"]
    headless = built["Service/events-headless"]["spec"]["ports"]
    for monitor, endpoints in (("PodMonitor", "podMetricsEndpoints"),
                               ("ServiceMonitor", "endpoints")):
        jsonschema.validate(docs[monitor], SCHEMAS[monitor], cls=jsonschema.Draft7Validator)
        [endpoint] = docs[monitor]["spec"][endpoints]
        assert (endpoint["port"], endpoint["scheme"], endpoint["tlsConfig"]) == (
            "metrics-tls", "https", want)
        assert endpoint["port"] in {p["name"] for p in container["ports"]}
        assert endpoint["port"] in {p["name"] for p in headless}
    plain = render(chart, {"monitoring": {"podMonitor": {"enabled": True}}})
    [endpoint] = plain["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "30s"}


def test_the_alerts(chart: helm_python.Chart) -> None:
    rules = render(chart, {"monitoring": {"prometheusRule": {
        "enabled": True, "consumerLagThreshold": 500, "diskFreeRatio": 0.2}}})["PrometheusRule"]
    exprs = rule_exprs(rules)
    assert sorted(exprs) == ["StreamletBrokerDown", "StreamletConsumerLagGrowing",
                             "StreamletDiskFilling", "StreamletElectionChurn",
                             "StreamletStreamUnavailable", "StreamletStreamUnderReplicated"]
    assert exprs["StreamletBrokerDown"] == 'up{job="streamlet-broker"} == 0'
    assert "streamlet_consumer_lag > 500" in exprs["StreamletConsumerLagGrowing"]
    assert "< 0.2" in exprs["StreamletDiskFilling"]
    assert metric_names(exprs["StreamletStreamUnderReplicated"]) == {
        "streamlet_replication_in_sync_members", "streamlet_replication_members"}
    assert exprs["StreamletElectionChurn"].endswith("> 5")
    by = {r["alert"]: r for g in rules["spec"]["groups"] for r in g["rules"]}
    assert by["StreamletStreamUnderReplicated"]["for"] == "5m"
    churn = render(chart, {"monitoring": {"prometheusRule": {
        "enabled": True, "electionChurnThreshold": 2, "underReplicatedFor": "10m"}}})
    by = {r["alert"]: r for g in churn["PrometheusRule"]["spec"]["groups"] for r in g["rules"]}
    assert "[10m]" in by["StreamletElectionChurn"]["expr"]
    assert by["StreamletElectionChurn"]["expr"].endswith("> 2")
    assert by["StreamletStreamUnderReplicated"]["for"] == "10m"
    for rule in rules["spec"]["groups"][0]["rules"]:
        assert rule["labels"]["severity"] in ("critical", "warning")
        # Prometheus' own templates survive Helm's
        assert "{{ $labels." in rule["annotations"]["summary"]
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]")


def test_the_dashboard(chart: helm_python.Chart) -> None:
    cm = render(chart, ALL_ON)["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = dashboard(cm)
    assert dash["uid"] == "streamlet-brokers" and len(dash["panels"]) >= 10
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert json.loads((CHART / "dashboards" / "streamlet.json").read_text()) == dash


@pytest.mark.process
async def test_every_metric_the_rules_and_the_dashboard_use_is_scraped(
        chart: helm_python.Chart, broker_factory: Callable[..., BrokerProcess],
        tmp_path: Path) -> None:
    docs = render(chart, ALL_ON)
    used = set().union(*map(metric_names, rule_exprs(docs["PrometheusRule"]).values()))
    used |= dashboard_names(dashboard(docs["ConfigMap"]))
    assert {"streamlet_consumer_lag", "streamlet_stream_writable", "streamlet_disk_free_bytes",
            "streamlet_publish_confirm_seconds_bucket", "up"} <= used
    port = free_port()
    b = broker_factory(extra_args=["--metrics-port", str(port)])
    async with Producer(b.host, b.port, username="guest", password="guest") as p:
        await p.create_stream("s")
        await p.send_batch("s", [RawMessage(b"m") for _ in range(10)])
    async with Consumer(b.host, b.port, username="guest", password="guest") as c:
        await c.subscribe("s", lambda m, ctx: None, subscriber_name="app")
        await c.store_offset(stream="s", subscriber_name="app", offset=3)
        samples = await eventually(lambda: _with_lag(port), what="a consumer lag")
    scraped = {name for name, _ in samples}
    replicated = {n for n in used if n.startswith("streamlet_replication_")}
    missing = used - scraped - replicated - {"up"}  # up: Prometheus' own, per target
    assert not missing, f"used but not scraped: {sorted(missing)}"
    assert replicated, "the replication alerts' metrics: scraped from a replicated stream"
    members, metrics, _ = replicated_cluster(tmp_path, broker_factory)
    for m in members:
        async with Producer(m.host, m.port, username="guest", password="guest") as p:
            await p.create_stream("s")
    assign(members, "s", 1, leader=0)
    leader = await eventually(lambda: _replicated(metrics[0]), what="the leader's follower lag")
    scraped = {name for name, _ in leader}
    assert not replicated - scraped, f"used but not scraped: {sorted(replicated - scraped)}"


async def _replicated(port: int) -> Any:
    """The leader's samples once it reports its followers' lag."""
    samples = await scrape(port)
    return samples if any(n == "streamlet_replication_follower_lag_bytes" for n, _ in samples) \
        else None


async def _with_lag(port: int) -> Any:
    samples = await scrape(port)
    return samples if any(n == "streamlet_consumer_lag" for n, _ in samples) else None


def test_scrape_helper_reads_the_text_format() -> None:
    """parse() keeps every sample (a sanity check of the helper the scrape tests use)."""
    text = "# TYPE a counter\na_total{x=\"1\"} 2.0\n# TYPE g gauge\ng 3.0\n"
    assert parse(text) == {("a_total", (("x", "1"),)): 2.0, ("g", ()): 3.0}
