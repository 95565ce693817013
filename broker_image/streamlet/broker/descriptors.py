"""The core's Descriptors port for this process: how many file descriptors are open (the
entries of /proc/self/fd) and the soft RLIMIT_NOFILE. The registry refuses a create whose
streams would not fit (core/registry.py ``Limits``)."""

from __future__ import annotations

import os
import resource


class ProcessDescriptors:
    def descriptors(self) -> tuple[int, int] | None:
        """(open now, soft limit); None when unlimited, or without /proc to count them."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        try:
            return len(os.listdir("/proc/self/fd")), soft
        except OSError:  # no /proc: the other limits only
            return None
