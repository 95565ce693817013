"""Operator start and stop: kopf's settings, and the runtime the handlers use."""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf

from ..constants import ANNOTATION_PREFIX, FINALIZER
from ..kube import Kube
from ..runtime import Runtime


def default_kube(settings: kopf.OperatorSettings) -> Kube:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return Kube.in_cluster()
    info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise kopf.PermanentError("no in-cluster service account and no kubeconfig")
    return Kube.from_connection_info(info)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    # Keep kopf's bookkeeping in annotations: the CRDs' status schemas have no room for it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.watching.server_timeout = 300
    # Timers run every few seconds per object: post Events for warnings only, not each success.
    settings.posting.level = logging.WARNING
    # A Stream's finalizer waits for its timer to exit; look again soon, not after kopf's 60 s.
    settings.background.cancellation_polling = 1.0
    if getattr(memo, "runtime", None) is None:
        memo.runtime = Runtime(kube=default_kube(settings))


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    runtime = getattr(memo, "runtime", None)
    if isinstance(runtime, Runtime):
        close_admin = getattr(runtime.admin, "close", None)
        if close_admin is not None:
            await close_admin()
        await runtime.kube.close()
