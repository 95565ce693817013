"""`streamlet policies set|list|delete`: the management API's policies (RabbitMQ's
/api/policies), which change a running stream's retention and segment size on every broker
of a cluster (docs/operations.md, "Policies"). Found and authenticated as the other
management API commands (cli/mgmt.py); an administrator's (a user without [[permissions]])."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

from .parser import Commands, connection, http_options
from .values import Parser, non_negative_int, positive_int

APPLY_TO = ("all", "queues", "streams")
#: `policies list`'s columns: keys of RabbitMQ's policy object
COLUMNS = ("vhost", "name", "pattern", "apply-to", "priority", "definition")


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    http = http_options()
    cmd = sub.add_parser("policies", help="set, list or delete policies: a stream's retention "
                         "changed live (management API)", parents=[conn, http])
    psub = cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    put = psub.add_parser("set", help="set a policy (made or changed)", parents=[conn, http],
                          description=(
        "Set the policy NAME of --vhost (default /) through PUT /api/policies/VHOST/NAME: "
        "the streams whose name PATTERN (a regular expression, searched) finds run with its "
        "retention and segment size from now on, on every broker of the cluster; a key it "
        "sets wins over the stream's Create argument, the others keep it. Of the policies "
        "matching a stream the one of highest --priority applies. Give at least one of "
        "--max-age, --max-length-bytes, --segment-size-bytes."))
    put.add_argument("name", help="the policy's name")
    put.add_argument("pattern", help="a regular expression on stream names, e.g. '^orders'")
    put.add_argument("--max-age", metavar="AGE",
                     help="drop segments older than AGE: a number and one of Y M D h m s, e.g. "
                          "7D (0s: no age limit)")
    put.add_argument("--max-length-bytes", type=non_negative_int, metavar="N",
                     help="keep the newest segments that fit in N bytes (0: no limit)")
    put.add_argument("--segment-size-bytes", type=positive_int, metavar="N",
                     help="new segments roll at N bytes (stream-max-segment-size-bytes)")
    put.add_argument("--priority", type=int, default=0,
                     help="the highest applies where two match (default 0)")
    put.add_argument("--apply-to", choices=APPLY_TO, default="streams",
                     help="what it applies to (default streams; all and queues reach streams "
                          "too, as in RabbitMQ)")
    psub.add_parser("list", help="list policies: vhost, name, pattern, apply-to, priority, "
                    "definition", parents=[conn, http], description=(
        "List the policies through GET /api/policies; --vhost narrows it to one virtual "
        "host."))
    delete = psub.add_parser("delete", help="delete a policy", parents=[conn, http],
                             description=(
        "Delete the policy NAME of --vhost (default /) through DELETE /api/policies/VHOST/"
        "NAME: the streams it applied to take their own arguments back."))
    delete.add_argument("name", help="the policy's name")


def check(args: argparse.Namespace, parser: Parser) -> None:
    connection(args, parser, http=True)
    if args.action == "set" and not definition(args):
        parser.error("policies set: give at least one of --max-age, --max-length-bytes, "
                     "--segment-size-bytes")


def definition(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, key in (("max_age", "max-age"), ("max_length_bytes", "max-length-bytes"),
                      ("segment_size_bytes", "stream-max-segment-size-bytes")):
        if getattr(args, flag, None) is not None:
            out[key] = getattr(args, flag)
    return out


def body(args: argparse.Namespace) -> dict[str, Any]:
    """The PUT's body, in RabbitMQ's shape."""
    return {"pattern": args.pattern, "apply-to": args.apply_to, "priority": args.priority,
            "definition": definition(args)}


def target(args: argparse.Namespace) -> str:
    vhost = args.vhost_filter
    if args.action == "list":
        return "/api/policies" + ("" if vhost is None else f"/{quote(vhost, safe='')}")
    return f"/api/policies/{quote(vhost or '/', safe='')}/{quote(args.name, safe='')}"


def rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**p, "definition": json.dumps(p.get("definition"), sort_keys=True)} for p in items]


def run(args: argparse.Namespace) -> int:
    from . import mgmt
    from .tables import field, table

    vhost = args.vhost_filter or "/"
    try:
        mgmt.find_api(args)
        try:
            if args.action == "set":
                mgmt.request(args, "PUT", target(args), body(args))
                print(f"policy {args.name} set in virtual host {vhost}")
                return 0
            if args.action == "delete":
                mgmt.request(args, "DELETE", target(args))
                print(f"policy {args.name} deleted from virtual host {vhost}")
                return 0
            items = mgmt.request(args, "GET", target(args))
        except mgmt.NotFound:
            what = (f"no virtual host {vhost!r}" if args.action != "delete" else
                    f"no policy {args.name!r} in virtual host {vhost!r} (or no such vhost)")
            raise mgmt.ApiError(f"{what} on {args.host}:{args.port}") from None
    except mgmt.ApiError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    if args.json:
        for item in items:
            print(json.dumps(item, sort_keys=True))
    else:
        print("\n".join(table(rows(items), [(k, field(k)) for k in COLUMNS])))
    return 0

