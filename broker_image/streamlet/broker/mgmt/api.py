"""The management API's pages: a request (authenticated, routed) in, a JSON response out.
Routing (routes.py), identity and visibility (identity.py), the shapes (views.py) and the list
parameters (query.py) are pure; this module reads the broker and ties them together."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ... import __version__
from ...core.registry import LimitReached
from ..arguments import parse_create_arguments, replication_request, valid_stream_name
from ..config.model import ConfigError
from ..http import Request, Response
from ..rabbitmq.handshake import ANNOUNCED_VERSION
from . import closing, policies, query, snapshot, views
from .declare import Refusal, declaration, inequivalent
from .identity import Identity, Refused, Visibility, authenticate
from .routes import NoRoute, route

if TYPE_CHECKING:
    from ..server import Broker, Client

log = logging.getLogger("streamlet.broker")

JSON = "application/json"
REALM = 'Basic realm="streamlet management"'


def reply(status: int, doc: Any) -> Response:
    return Response(status, json.dumps(doc).encode(), JSON)


def not_found() -> Response:
    return reply(404, views.error("Object Not Found", "Not Found"))


def bad_request(reason: str) -> Response:
    """What RabbitMQ answers a declaration it refuses (rabbitmqadmin prints the reason)."""
    return reply(400, views.error("bad_request", reason))


def not_authorised(reason: str) -> Response:
    """What RabbitMQ answers a user that may not see or do this: 401 (not 403), as it does."""
    return reply(401, views.error("not_authorised", reason))


class Page:
    """One request's view of the broker: its user's visibility, the connections read once."""

    def __init__(self, broker: Broker, who: Identity, request: Request, port: int) -> None:
        self.broker = broker
        self.who = who
        self.request = request
        self.port = port
        self.see = Visibility(who, broker.access)
        here = broker.config.advertised
        self.node = f"streamlet@{snapshot.address(*here)}"
        self._conns: list[tuple[snapshot.ConnInfo, Client]] | None = None

    # --- what this user may see ---------------------------------------------------------------

    def conns(self) -> list[tuple[snapshot.ConnInfo, Client]]:
        if self._conns is None:
            self._conns = snapshot.connections(self.broker)
        return self._conns

    def visible_conns(self) -> list[snapshot.ConnInfo]:
        return [c for c, _ in self.conns() if self.see.owner(c.user)]

    def streams(self, vhost: str | None = None) -> list[snapshot.StreamInfo]:
        return [snapshot.stream(self.broker, v, s) for v, name, s in
                snapshot.streams_of(self.broker)
                if (vhost is None or v == vhost) and self.see.vhost(v) and self.see.stream(v, name)]

    def vhost_check(self, vhost: str | None) -> Response | None:
        """404 for a vhost that does not exist, 401 for one the user has no access to."""
        if vhost is None:
            return None
        if vhost not in self.broker.vhosts:
            return not_found()
        if not self.see.vhost(vhost):
            return not_authorised("User not authorised to access virtual host")
        return None

    def stream_check(self, vhost: str, name: str) -> Response | None:
        if self.broker.vhosts[vhost].streams.get(name) is None:
            return not_found()
        if not self.see.stream(vhost, name):
            return not_authorised("User not authorised to access the stream")
        return None

    def listed(self, items: list[dict[str, Any]]) -> Response:
        return reply(200, query.apply(items, self.request.query))

    # --- the pages ------------------------------------------------------------------------------

    def overview(self) -> Response:
        streams = self.streams()
        conns = self.visible_conns()
        by_id = {id(conn): info for info, conn in self.conns() if self.see.owner(info.user)}
        cfg = self.broker.config
        listeners = [{"node": self.node, "protocol": views.PROTOCOLS.get(lst.protocol,
                                                                          lst.protocol)
                      + ("/ssl" if lst.tls else ""), "ip_address": lst.host, "port": lst.port}
                     for lst in cfg.listeners]
        for protocol, port in (("http", self.broker.http_port), ("https", self.broker.https_port)):
            if port:
                listeners.append({"node": self.node, "protocol": protocol, "ip_address": (
                    cfg.http.host if cfg.http and cfg.http.host else cfg.host), "port": port})
        return reply(200, views.overview(
            cluster_name=cfg.cluster_name, node=self.node, version=__version__,
            rabbitmq_version=ANNOUNCED_VERSION, connections=len(conns), streams=streams,
            consumers=len(snapshot.consumers(self.broker, by_id)),
            publishers=len(snapshot.publishers(self.broker, by_id)), listeners=listeners,
            port=self.port))

    def whoami(self) -> Response:
        return reply(200, {"name": self.who.name, "tags": self.who.tags})

    def vhosts(self) -> Response:
        streams = self.streams()
        return self.listed([views.vhost(v, streams) for v in sorted(self.broker.vhosts)
                            if self.see.vhost(v)])

    def vhost(self, vhost: str) -> Response:
        return self.vhost_check(vhost) or reply(200, views.vhost(vhost, self.streams(vhost)))

    def connections(self, vhost: str | None = None, protocol: str | None = None) -> Response:
        refused = self.vhost_check(vhost)
        if refused:
            return refused
        return self.listed([views.connection(c, self.node) for c in self.visible_conns()
                            if (vhost is None or c.vhost == vhost)
                            and (protocol is None or c.protocol == protocol)])

    def stream_connections(self, vhost: str | None = None) -> Response:
        return self.connections(vhost, "rabbitmq")

    def _named(self, name: str) -> tuple[snapshot.ConnInfo, Client] | Response:
        found = next(((c, conn) for c, conn in self.conns() if c.name == name), None)
        if found is None:
            return not_found()
        if not self.see.owner(found[0].user):
            return not_authorised("User not authorised to access object")
        return found

    def connection(self, name: str) -> Response:
        found = self._named(name)
        if isinstance(found, Response):
            return found
        return reply(200, views.connection(found[0], self.node))

    def close(self, name: str) -> Response:
        found = self._named(name)
        if isinstance(found, Response):
            return found
        closing.close(found[1], self.request.headers.get("x-reason"))
        return Response(204, content_type=JSON)

    def queues(self, vhost: str | None = None) -> Response:
        return self.vhost_check(vhost) or self.listed(
            [views.queue(s, self.node) for s in self.streams(vhost)])

    def queue(self, vhost: str, name: str) -> Response:
        refused = self.vhost_check(vhost) or self.stream_check(vhost, name)
        if refused:
            return refused
        stream = self.broker.vhosts[vhost].streams.get(name)
        assert stream is not None
        return reply(200, views.queue(snapshot.stream(self.broker, vhost, stream), self.node))

    def declare(self, vhost: str, name: str) -> Response:
        """PUT: a stream made (201) or found as declared (204), else 400 and why (declare.py)."""
        refused = self.vhost_check(vhost)
        if refused:
            return refused
        if not self.see.configure(vhost, name):
            return not_authorised("Access refused.")
        why = valid_stream_name(name)
        found = declaration(self.request.body, name) if why is None else Refusal(why)
        if isinstance(found, Refusal):
            return bad_request(found.reason)
        try:
            settings = parse_create_arguments(found, self.broker.config.retention)
            size, _ = replication_request(found)
        except ConfigError as e:
            return bad_request(str(e))
        streams = self.broker.vhosts[vhost].streams
        existing = streams.get(name)
        if existing is not None:
            differs = inequivalent(found, settings, existing.settings, name, vhost)
            return bad_request(differs) if differs else Response(204, content_type=JSON)
        if streams.unreadable_reason(name) is not None:
            return bad_request(f"the files of stream '{name}' on this broker were set aside as "
                               "unreadable (its log says why)")
        if size > 1 and self.broker.cluster is not None:
            return bad_request("a replicated stream (x-initial-cluster-size above 1) is made "
                               "by the stream protocol's Create, which places its members: "
                               f"streamlet streams create {name} --replicas {size}")
        try:
            streams.create(name, settings)
        except LimitReached:  # logged, with why, where it was reached
            return bad_request("a limit of the broker was reached (its log says which)")
        except OSError as e:
            log.error("create %r failed: %s", name, e)
            return reply(500, views.error("internal_error", f"creating the stream failed: {e}"))
        log.info("stream %r created through the management API", name)
        return Response(201, content_type=JSON)

    def delete(self, vhost: str, name: str) -> Response:
        """DELETE: the stream and its files (204); a replicated one is left to the stream
        protocol's Delete, which deletes it on every member."""
        refused = self.vhost_check(vhost) or self.stream_check(vhost, name)
        if refused:
            return refused
        if not self.see.configure(vhost, name):
            return not_authorised("Access refused.")
        broker, host = self.broker, self.broker.vhosts[vhost]
        held = host.streams.get(name)
        member = broker.members.get(held) if held is not None else None
        if member is not None and any(m != broker.config.member for m in member.state.members):
            return bad_request("a replicated stream is deleted on every member by the stream "
                               f"protocol's Delete: streamlet streams delete {name}")
        stream = broker.delete_stream(host, name)  # files gone on return
        if stream is not None:
            broker.stream_gone(stream)
        log.info("stream %r deleted through the management API", name)
        return Response(204, content_type=JSON)

    def _mine(self, vhost: str | None, stream: str | None) -> dict[int, snapshot.ConnInfo] | Response:
        refused = self.vhost_check(vhost)
        if refused is None and vhost is not None and stream is not None:
            refused = self.stream_check(vhost, stream)
        if refused:
            return refused
        return {id(conn): info for info, conn in self.conns() if self.see.owner(info.user)}

    def _wanted(self, vhost: str | None, stream: str | None, at: tuple[str, str]) -> bool:
        return ((vhost is None or at[0] == vhost) and (stream is None or at[1] == stream)
                and self.see.vhost(at[0]) and self.see.stream(*at))

    def publishers(self, vhost: str | None = None, stream: str | None = None) -> Response:
        mine = self._mine(vhost, stream)
        if isinstance(mine, Response):
            return mine
        return self.listed([views.publisher(p, self.node)
                            for p in snapshot.publishers(self.broker, mine)
                            if self._wanted(vhost, stream, (p.vhost, p.stream))])

    def consumers(self, vhost: str | None = None, stream: str | None = None) -> Response:
        mine = self._mine(vhost, stream)
        if isinstance(mine, Response):
            return mine
        return self.listed([views.consumer(c, self.node)
                            for c in snapshot.consumers(self.broker, mine)
                            if self._wanted(vhost, stream, (c.vhost, c.stream))])

    # --- policies (policies.py) ---------------------------------------------------------------

    def _policy_check(self, vhost: str | None) -> Response | None:
        why = policies.refused(self.who)
        return not_authorised(why) if why else self.vhost_check(vhost)

    def policies(self, vhost: str | None = None) -> Response:
        return self._policy_check(vhost) or self.listed(policies.listed(self.broker, vhost))

    def policy(self, vhost: str, name: str) -> Response:
        refused = self._policy_check(vhost)
        if refused:
            return refused
        found = policies.shown(self.broker, vhost, name)
        return not_found() if found is None else reply(200, found)

    def set_policy(self, vhost: str, name: str) -> Response:
        refused = self._policy_check(vhost)
        if refused:
            return refused
        done = policies.put(self.broker, vhost, name, self.request.body)
        return bad_request(done) if isinstance(done, str) else Response(done, content_type=JSON)

    def delete_policy(self, vhost: str, name: str) -> Response:
        refused = self._policy_check(vhost)
        if refused:
            return refused
        if not policies.delete(self.broker, vhost, name):
            return not_found()
        return Response(204, content_type=JSON)


class ManagementApi:
    """``answer`` is the HTTP server's callback; ``port`` the port it serves on (the overview
    names it), set once listening."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.port = 0

    def answer(self, request: Request) -> Response:
        found = route(request.method, request.segments)
        if isinstance(found, NoRoute):
            if found.status == 405:
                return Response(405, json.dumps(views.error(
                    "Method Not Allowed", f"{request.method} is not allowed here")).encode(),
                    JSON, (("Allow", ", ".join(found.allow)),))
            return not_found()
        who = authenticate(self.broker.config, request.headers.get("authorization"),
                           request.peer)
        if isinstance(who, Refused):
            return Response(401, json.dumps(views.error("not_authorized", who.reason)).encode(),
                            JSON, (("WWW-Authenticate", REALM),))
        page = Page(self.broker, who, request, self.port)
        handler = getattr(page, found.page)
        response: Response = handler(**found.params)
        return response
