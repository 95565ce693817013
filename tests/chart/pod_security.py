"""A checker for the Kubernetes Pod Security Standards' "restricted" profile (every baseline
control and every restricted one), as the Kubernetes documentation lists them
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), applied to a pod's
metadata and spec the way the PodSecurity admission controller applies them.

``violations`` returns one line per broken control; an empty list means the pod is admitted in
a namespace labelled ``pod-security.kubernetes.io/enforce: restricted``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield f"{field}[{container.get('name', '?')}]", container


def violations(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> list[str]:
    """What keeps the pod (its ``spec`` and ``metadata``) out of the restricted profile."""
    found: list[str] = []
    pod_sc: dict[str, Any] = spec.get("securityContext") or {}
    containers = list(_containers(spec))
    contexts = [(where, c.get("securityContext") or {}) for where, c in containers]
    if not spec.get("containers"):
        found.append("the pod has no containers")

    # --- baseline -----------------------------------------------------------------------------
    # HostProcess
    for where, sc in [("pod", pod_sc), *contexts]:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}: windowsOptions.hostProcess")
    # Host namespaces
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"pod: {field}")
    # Privileged containers
    for where, sc in contexts:
        if sc.get("privileged"):
            found.append(f"{where}: privileged")
    # HostPath volumes (and, restricted, any type not on the list)
    for volume in spec.get("volumes") or []:
        kinds = [k for k in volume if k != "name"]
        if "hostPath" in kinds:
            found.append(f"volume {volume.get('name')}: hostPath")
        elif any(k not in RESTRICTED_VOLUMES for k in kinds):
            found.append(f"volume {volume.get('name')}: type {kinds} not allowed")
    # Host ports
    for where, container in containers:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"{where}: hostPort {port['hostPort']}")
    # AppArmor: the annotation and the field
    for key, value in ((metadata or {}).get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
                value in ("runtime/default", "") or value.startswith("localhost/")):
            found.append(f"annotation {key}: {value}")
    for where, sc in [("pod", pod_sc), *contexts]:
        profile = sc.get("appArmorProfile")
        if profile is not None and profile.get("type") not in APPARMOR_TYPES:
            found.append(f"{where}: appArmorProfile {profile.get('type')}")
    # SELinux
    for where, sc in [("pod", pod_sc), *contexts]:
        options = sc.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES:
            found.append(f"{where}: seLinuxOptions.type {options['type']}")
        for field in ("user", "role"):
            if options.get(field):
                found.append(f"{where}: seLinuxOptions.{field}")
    # /proc mount type
    for where, sc in contexts:
        if sc.get("procMount", "Default") != "Default":
            found.append(f"{where}: procMount {sc['procMount']}")
    # Sysctls
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"pod: sysctl {sysctl.get('name')}")
    # Capabilities (baseline): adds only from the default set
    for where, sc in contexts:
        for cap in (sc.get("capabilities") or {}).get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                found.append(f"{where}: adds capability {cap}")

    # --- restricted ---------------------------------------------------------------------------
    # Privilege escalation: false, explicitly, on every container
    for where, sc in contexts:
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation is not false")
    # Running as non-root: true at the pod or on every container, false nowhere
    pod_non_root = pod_sc.get("runAsNonRoot")
    if pod_non_root is False:
        found.append("pod: runAsNonRoot false")
    for where, sc in contexts:
        value = sc.get("runAsNonRoot")
        if value is False or (value is None and pod_non_root is not True):
            found.append(f"{where}: runAsNonRoot is not true (nor the pod's)")
    # Running as a non-root user: runAsUser never 0
    for where, sc in [("pod", pod_sc), *contexts]:
        if sc.get("runAsUser") == 0:
            found.append(f"{where}: runAsUser 0")
    # Seccomp: RuntimeDefault or Localhost at the pod or on every container, Unconfined nowhere
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_TYPES:
        found.append(f"pod: seccompProfile {pod_seccomp}")
    for where, sc in contexts:
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp is None and pod_seccomp not in SECCOMP_TYPES:
            found.append(f"{where}: no seccompProfile (nor the pod's)")
        elif seccomp is not None and seccomp not in SECCOMP_TYPES:
            found.append(f"{where}: seccompProfile {seccomp}")
    # Capabilities (restricted): drop ALL, add at most NET_BIND_SERVICE
    for where, sc in contexts:
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{where}: capabilities do not drop ALL")
        for cap in caps.get("add") or []:
            if cap not in RESTRICTED_CAPABILITIES:
                found.append(f"{where}: adds capability {cap} (restricted: NET_BIND_SERVICE only)")
    return found


def pod_templates(obj: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(metadata, spec) of each pod a workload object makes (none for other kinds)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return [(obj.get("metadata") or {}, spec)]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        template = spec["template"]
        return [(template.get("metadata") or {}, template["spec"])]
    if kind == "CronJob":
        template = spec["jobTemplate"]["spec"]["template"]
        return [(template.get("metadata") or {}, template["spec"])]
    return []
