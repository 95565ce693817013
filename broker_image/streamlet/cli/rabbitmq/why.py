"""Why the broker refused a Create: the protocol answers only a code (17, precondition
failed), so the CLI checks the arguments as the broker does and names the reason."""

from __future__ import annotations

from ...broker.arguments import parse_create_arguments
from ...broker.config.model import ConfigError, Retention
from ...client import Client


async def create_refused(client: Client, name: str, arguments: dict[str, str]) -> str:
    try:
        parse_create_arguments(arguments, Retention())
    except ConfigError as e:
        return str(e)
    if await client.stream_exists(name):
        return (f"{name} exists with different arguments (streamlet streams info {name} "
                "shows them)")
    return "a limit of the broker or the cluster's placement (the broker's log says which)"
