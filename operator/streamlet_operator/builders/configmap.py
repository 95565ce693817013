"""The broker's configuration file, carried by a ConfigMap and read by `streamlet serve --config`."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from .. import names
from ..model import BrokerModel, Permission
from .common import metadata, toml_string

DATA_DIR = "/var/lib/streamlet"
TLS_DIR = "/etc/streamlet/tls"
#: spec.tls.caSecretName's ca.crt (without it, the CA is TLS_DIR's ca.crt)
TLS_CA_DIR = "/etc/streamlet/tls-ca"
CA_KEY = "ca.crt"
USERS_DIR = "/etc/streamlet/users"
# Where the stream directory ConfigMap is mounted (builders/directory.py).
DIRECTORY_FILE = f"/etc/streamlet/directory/{names.DIRECTORY_KEY}"


def peers(broker: BrokerModel, pods: int) -> list[str]:
    """Every pod's address by ordinal, as the brokers reach each other: the pod's DNS name
    through the headless Service and the stream port, or the TLS port when they replicate
    over TLS (TLS only: the pods' certificates name every pod's DNS name). In PodDNS mode
    without ``advertise.port`` this is what the pod advertises to clients."""
    return [f"{names.pod_dns(broker.name, i, broker.namespace, broker.advertise.cluster_domain)}"
            f":{broker.peer_port}" for i in range(pods)]


@dataclass(frozen=True)
class Access:
    """The vhosts and permissions the broker's config gets, and what was wrong with the spec."""

    vhosts: tuple[str, ...]
    permissions: tuple[Permission, ...]
    problems: tuple[str, ...] = ()


def _regex_problem(pattern: str) -> str | None:
    try:
        re.compile(pattern)  # the broker's own engine (Python's re), not the API server's CEL
    except re.error as e:
        return str(e)
    return None


def plan_access(broker: BrokerModel) -> Access:
    """spec.vhosts and spec.permissions made into a config the broker accepts, whatever the
    spec says: the broker refuses to start on a bad entry, and a crash-looping pod serves no
    one. Every fix fails closed: a bad regular expression becomes "" (denies all), a
    permission on an unknown vhost is dropped, and a user left with no permission at all gets
    a deny-all one on "/" (a user without any entry would have full access). Each fix is a
    problem, for the Broker's AccessConfigured condition."""
    vhosts = ("/", *broker.vhosts)
    problems: list[str] = []
    kept: dict[tuple[str, str], Permission] = {}
    restricted: list[str] = []
    for p in broker.permissions:
        if p.user == names.OPERATOR_USER:  # it creates, moves and replicates every stream
            problems.append(f"permissions of {p.user!r}: the operator's own user is never "
                            "restricted (left out)")
            continue
        restricted.append(p.user)
        if p.vhost not in vhosts:
            problems.append(f"permission of {p.user!r} on vhost {p.vhost!r}: no such vhost in "
                            "spec.vhosts (left out)")
            continue
        fixed = p
        for kind in ("configure", "write", "read"):
            error = _regex_problem(getattr(p, kind))
            if error is not None:
                problems.append(f"permission of {p.user!r} on {p.vhost!r}: {kind} "
                                f"{getattr(p, kind)!r} is not a regular expression ({error}); "
                                "it denies everything instead")
                fixed = replace(fixed, **{kind: ""})
        if (p.user, p.vhost) in kept:
            problems.append(f"permissions of {p.user!r} on {p.vhost!r} given twice (the last one "
                            "counts)")
        kept[(p.user, p.vhost)] = fixed
    for user in dict.fromkeys(restricted):
        if not any(u == user for u, _ in kept):
            kept[(user, "/")] = Permission(user, "/", "", "", "")
    return Access(vhosts, tuple(kept.values()), tuple(problems))


def unknown_users(broker: BrokerModel, users: Collection[str]) -> list[str]:
    """Users spec.permissions names that the users Secret does not define (builders/secret.py
    renders them without a usable password: a client certificate naming them is their only way
    in)."""
    return sorted({p.user for p in broker.permissions} - set(users))


def render_config(broker: BrokerModel, pods: int | None = None) -> str:
    """The broker's TOML for a StatefulSet of ``pods`` pods (default ``spec.replicas``). Users
    come from a Secret, mounted as the file ``users_file`` names.

    The advertised host is per pod, so it is not here: each pod sets STREAMLET_ADVERTISED_HOST.
    So is the member id: ``member = "auto"`` is the ordinal the pod's hostname ends in. Every
    pod is a peer, so a Create with ``initial-cluster-size`` > 1 places its members among them
    (brokers read it at start: a pod running before a scale keeps the peers of then, as the
    pod count does not roll the pods, statefulset.config_hash). ``resume_roles``: a restarted
    pod takes up its replicated streams' roles again in their epoch, so streams come back
    even while the operator is down; when the operator elected meanwhile, it assigns the
    returning pod its role in the new epoch (driver.py).
    """
    r = broker.retention
    pods = broker.replicas if pods is None else pods
    lines = [
        "[server]",
        'host = "0.0.0.0"',
        f"port = {broker.port}",
        f"advertised_port = {broker.advertise.port or broker.port}",
        f"data_dir = {toml_string(DATA_DIR)}",
        f"cluster_name = {toml_string(broker.name)}",
        f"users_file = {toml_string(USERS_DIR + '/' + names.USERS_KEY)}",
        "",
        "[cluster]",
        f"directory_file = {toml_string(DIRECTORY_FILE)}",
        'member = "auto"',
        "peers = [" + ", ".join(toml_string(p) for p in peers(broker, pods)) + "]",
        # a restarted pod takes up its roles (the operator re-assigns them after an election)
        "resume_roles = true",
        *([f"tls = {'true' if broker.replication_tls else 'false'}"]  # TLS only: over TLS
          if broker.tls is not None else []),
        "",
        "[retention]",
        f"max_age = {toml_string(r.max_age or '0s')}",
        f"max_length_bytes = {r.max_length_bytes or 0}",
        f"max_segment_size_bytes = {r.max_segment_size_bytes or 500_000_000}",
        "",
    ]
    access = plan_access(broker)
    for vhost in access.vhosts:
        lines += ["[[vhosts]]", f"name = {toml_string(vhost)}", ""]
    for p in access.permissions:
        lines += ["[[permissions]]", f"user = {toml_string(p.user)}",
                  f"vhost = {toml_string(p.vhost)}", f"configure = {toml_string(p.configure)}",
                  f"write = {toml_string(p.write)}", f"read = {toml_string(p.read)}", ""]
    tls = broker.tls
    if tls is not None:
        lines += [
            "[tls]",
            f"port = {tls.port}",
            # The keys of a kubernetes.io/tls Secret, mounted at TLS_DIR.
            f"certfile = {toml_string(TLS_DIR + '/tls.crt')}",
            f"keyfile = {toml_string(TLS_DIR + '/tls.key')}",
        ]
        if tls.cafile_wanted:
            ca_dir = TLS_CA_DIR if tls.ca_secret else TLS_DIR
            lines.append(f"cafile = {toml_string(ca_dir + '/' + CA_KEY)}")
        lines.append(f"verify_peer = {'true' if tls.verify_peer else 'false'}")
        if not tls.plain_listener and broker.advertise.port:  # advertise.port is the clients'
            lines.append(f"advertised_port = {broker.advertise.port}")
        lines.append("")
        if not tls.plain_listener:
            lines += ["[listeners.rabbitmq]", "enabled = false", ""]
    return "\n".join(lines)


def build_configmap(broker: BrokerModel, pods: int | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(broker, names.configmap(broker.name)),
        "data": {names.CONFIG_KEY: render_config(broker, pods)},
    }
