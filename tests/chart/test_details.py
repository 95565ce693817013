"""Details of the chart that strict tools and new users meet: no duplicate keys in any rendered
manifest, NOTES that say when nobody can log in to the Broker made with the release, and a
kubeVersion that covers what the operator's StatefulSets rely on."""

from __future__ import annotations

import re
from typing import Any

import helm_python
import pytest
import yaml

from streamlet_operator.builders.statefulset import build_statefulset
from streamlet_operator.model import BrokerModel
from tests.chart.conftest import CHART, KUBE_VERSIONS
from tests.chart.test_chart import VALUE_SETS

helm_python.disable_logging()

NOTES = "streamlet/templates/NOTES.txt"


def rendered(chart: helm_python.Chart, values: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = chart.render(values, name="streamlet", namespace="streamlet-system",
                                       is_install=True)
    return out


class DuplicateKey(Exception):
    pass


class StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with a key twice, as kubectl's strict decoding and
    kubeconform do (PyYAML and Helm keep the last one silently)."""


def _strict_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)  # type: ignore[no-untyped-call]
        if key in seen:
            raise DuplicateKey(f"{key!r} twice at line {key_node.start_mark.line + 1}")
        seen.add(key)
    return loader.construct_mapping(node)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def test_the_strict_loader_refuses_a_duplicate_key() -> None:
    with pytest.raises(DuplicateKey):
        yaml.load("labels:\n  a: 1\n  a: 1\n", Loader=StrictLoader)  # noqa: S506


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_no_manifest_has_a_duplicate_key(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    docs = 0
    for path, text in rendered(chart, values).items():
        if path.endswith(".yaml"):
            try:
                docs += sum(1 for d in yaml.load_all(text, Loader=StrictLoader) if d)  # noqa: S506
            except DuplicateKey as e:
                pytest.fail(f"{path}: {e}")
    assert docs


def test_notes_say_how_to_add_a_user_to_a_broker_made_without_one(
        chart: helm_python.Chart) -> None:
    notes = rendered(chart, {"broker": {"create": True}})[NOTES]
    assert "NO APPLICATION USER CAN LOG IN" in notes
    assert ("kubectl -n streamlet-system create secret generic streamlet-app-users "
            "--from-literal=app=change-me") in notes
    assert "--set broker.spec.usersSecret=streamlet-app-users" in notes
    assert "helm upgrade streamlet charts/streamlet -n streamlet-system --reuse-values" in notes


def test_notes_name_the_users_secret_when_there_is_one(chart: helm_python.Chart) -> None:
    notes = rendered(chart, {"broker": {"create": True, "spec": {"usersSecret": "app-users"}}}
                     )[NOTES]
    assert "NO APPLICATION USER" not in notes
    assert "users of the Secret app-users" in notes
    assert "create secret generic app-users" in notes


def test_notes_without_a_broker_say_nothing_of_users(chart: helm_python.Chart) -> None:
    notes = rendered(chart, {})[NOTES]
    assert "usersSecret" not in notes and "kubectl apply -f examples/broker.yaml" in notes


def _minimum(constraint: str) -> tuple[int, int]:
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)(?:\.\d+)?(?:-0)?", constraint.strip())
    assert m, f"expected a '>=X.Y.Z-0' kubeVersion, got {constraint!r}"
    return int(m.group(1)), int(m.group(2))


def test_kube_version_covers_the_pod_index_label() -> None:
    """advertise.hostTemplate's {ordinal} comes from the label apps.kubernetes.io/pod-index,
    which StatefulSets set from Kubernetes 1.28: the chart may not claim less."""
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    minimum = _minimum(chart_yaml["kubeVersion"])
    broker = BrokerModel.from_body({
        "metadata": {"name": "events", "namespace": "prod", "uid": "1"},
        "spec": {"advertise": {"mode": "Template", "hostTemplate": "b{ordinal}.example.com"}}})
    text = yaml.safe_dump(build_statefulset(broker, 3))
    if "apps.kubernetes.io/pod-index" in text:
        assert minimum >= (1, 28), chart_yaml["kubeVersion"]
    # and the versions the manifests are validated against start at the claimed minimum
    assert min(tuple(map(int, v.split("."))) for v in KUBE_VERSIONS) == minimum
