"""Broker configuration for tests that need an application user beside guest: ``app``, whose
configure, write and read patterns the test chooses (RabbitMQ's regular expressions)."""

from __future__ import annotations

APP = ("app", "app-secret")


def app_users(configure: str = "^app-", write: str = "^app-", read: str = "^app-",
              more: str = "") -> str:
    """[[users]] guest and app, ``more`` TOML after them (other users, vhosts), and app's
    permissions on vhost "/"."""
    return f"""
[[users]]
name = "guest"
password = "guest"
[[users]]
name = "{APP[0]}"
password = "{APP[1]}"
{more}
[[permissions]]
user = "{APP[0]}"
vhost = "/"
configure = "{configure}"
write = "{write}"
read = "{read}"
"""
