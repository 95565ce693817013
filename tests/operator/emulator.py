"""kmock's Kubernetes emulator, made strict enough for kopf to behave as on a real cluster.

The plain emulator assigns no uid/creationTimestamp/generation, has no real resourceVersion,
replays everything on watch and can lose events written between its watch snapshot and its
subscription. This subclass: fills those fields; bumps one global resourceVersion per write;
answers 409 to a stale resourceVersion and 422 to a failed JSON-patch test; keeps an event log
so a watch from a resourceVersion replays exactly what came after it; takes the watch snapshot
and the bus mark under one lock; honours a declared status subresource (writes to the object
ignore status, writes to /status change only status); names objects from generateName; and
forgets old requests, which kmock would otherwise scan on every new one.
"""

from __future__ import annotations

import copy
import datetime
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import attrs
import jsonpatch
import kmock
from kmock._internal import dicts, enums, rendering
from kmock._internal.k8s import KubernetesObjectConflictError, KubernetesScaffold

Event = tuple[int, dict[str, Any]]


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(kw_only=True)
class StrictEmulator(kmock.KubernetesEmulator):
    _rv: int = attrs.field(default=0, init=False)
    _log: dict[Any, list[Event]] = attrs.field(factory=dict, init=False)

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def _emit(self, resource: Any, type_: str, raw: dict[str, Any]) -> None:
        raw = copy.deepcopy(raw)
        self._log.setdefault(resource, []).append((self._rv, {"type": type_, "object": raw}))
        await self._buses[resource].put({"type": type_, "object": raw})

    def _has_status(self, resource: Any) -> bool:
        return resource in self.resources and "status" in self.resources[resource].subresources

    async def _route(self, request: rendering.Request) -> Any:
        # kmock routes a request by scanning every request it has seen (it keeps them all for
        # assertions), so a long operator run slows down with each call. Keep only this one: the
        # routing up to the chosen reaction runs without yielding, so no other request interferes.
        self._requests[:] = [request]
        for payload in self._payloads:
            payload._requests.clear()
        return await KubernetesScaffold._handle(self, request)

    async def _handle(self, request: rendering.Request) -> Any:
        if request.resource is None or request.action not in (
                enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE):
            return await self._route(request)
        gc_key = None
        async with self._lock:
            if request.action == enums.action.CREATE:
                self._create(request)
                key = self._key(request, request.data["metadata"]["name"])
                await self._emit(request.resource, "ADDED", self._objects[key].raw)
            elif request.action == enums.action.UPDATE and request.name:
                key = self._key(request, request.name)
                self._update(request, key)
                await self._emit(request.resource, "MODIFIED", self._objects[key].raw)
                gc_key = key
            elif request.action == enums.action.DELETE and request.name:
                key = self._key(request, request.name)
                if key not in self._objects or self._objects[key].deleted:
                    raise kmock.KubernetesObjectNotFoundError()
                obj = self._objects[key]
                meta = obj.get("metadata", {})
                if meta.get("finalizers") and not meta.get("deletionTimestamp"):
                    new = copy.deepcopy(obj.raw)
                    new["metadata"]["deletionTimestamp"] = _now()
                    new["metadata"]["resourceVersion"] = self._bump()
                    obj.history.append(new)
                    await self._emit(request.resource, "MODIFIED", obj.raw)
                gc_key = key
        try:
            return await self._route(request)
        finally:
            if gc_key is not None:
                await self._collect(request.resource, gc_key)

    def _key(self, request: rendering.Request, name: str) -> Any:
        return (request.resource, request.namespace, name)

    def _create(self, request: rendering.Request) -> None:
        obj = request.data
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)
        if request.namespace:
            meta["namespace"] = request.namespace
        key = self._key(request, meta["name"])
        if key in self._objects and not self._objects[key].deleted:
            raise KubernetesObjectConflictError()
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1,
                    resourceVersion=self._bump())
        if key not in self._objects:
            self._objects[key] = obj
        else:
            self._objects[key].create(obj)

    def _update(self, request: rendering.Request, key: Any) -> None:
        if key not in self._objects or self._objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        current = self._objects[key].raw
        patch = request.data
        status_only = request.subresource == "status"
        if isinstance(patch, dict):
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"].get("resourceVersion"):
                raise kmock.KubernetesError(409, "Conflict", "the object has been modified")
            if self._has_status(request.resource):
                # With a status subresource, each endpoint changes only its own part.
                if status_only:
                    patch = {"status": patch.get("status")}
                else:
                    patch = {k: v for k, v in patch.items() if k != "status"}
            new = dict(dicts.merge_patch_dict(current, patch))
        elif isinstance(patch, list):
            try:
                new = jsonpatch.apply_patch(current, patch, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise kmock.KubernetesError(422, "Invalid", f"JSON patch failed: {e}") from e
        else:
            raise kmock.KubernetesError(415, "UnsupportedMediaType", "patch body is not JSON")
        meta = new.setdefault("metadata", {})
        for field in ("uid", "creationTimestamp", "name", "namespace"):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
        generation = int(current["metadata"].get("generation") or 1)
        strip = ("metadata", "status")
        if {k: v for k, v in new.items() if k not in strip} != {
                k: v for k, v in current.items() if k not in strip}:
            generation += 1
        meta["generation"] = generation
        meta["resourceVersion"] = self._bump()
        self._objects[key].history.append(new)

    async def _collect(self, resource: Any, key: Any) -> None:
        """Remove an object marked for deletion once its finalizers are gone."""
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return
            obj = self._objects[key]
            meta = obj.get("metadata", {})
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                raw = copy.deepcopy(obj.raw)
                raw["metadata"]["resourceVersion"] = self._bump()
                obj.delete()
                await self._emit(resource, "DELETED", raw)
            elif not meta.get("finalizers") and not meta.get("deletionTimestamp"):
                # A delete request without finalizers: gone at once.
                pass

    async def _serve_delete(self, request: rendering.Request) -> rendering.Payload:
        key = self._key(request, request.name or "")
        async with self._lock:
            obj = self._objects[key]
            raw = copy.deepcopy(obj.last.raw)
            meta = obj.get("metadata", {}) if not obj.deleted else {}
            if not obj.deleted and not meta.get("finalizers"):
                raw["metadata"]["resourceVersion"] = self._bump()
                obj.delete()
                await self._emit(request.resource, "DELETED", raw)
        return raw

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        result = await super()._serve_list(request)
        assert isinstance(result, dict)
        result["metadata"] = {"resourceVersion": str(self._rv)}
        return result

    def _matches(self, request: rendering.Request, event: dict[str, Any]) -> bool:
        meta = event.get("object", {}).get("metadata", {})
        if request.namespace is not None and meta.get("namespace") != request.namespace:
            return False
        return request.name is None or meta.get("name") == request.name

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        yield b""
        assert request.resource is not None
        bus = self._buses[request.resource]
        since = request.params.get("resourceVersion")
        async with self._lock:  # no write can slip between the snapshot and the mark
            if since:
                backlog = [e for rv, e in self._log.get(request.resource, []) if rv > int(since)]
            else:
                backlog = [{"type": "ADDED", "object": copy.deepcopy(key_obj.raw)}
                           for (res, _, _), key_obj in self._objects.items()
                           if res == request.resource and not key_obj.deleted]
            marker = await bus.mark()
        try:
            for event in backlog:
                if self._matches(request, event):
                    yield event
            async for event in bus.stream(since=marker):
                if self._matches(request, event):
                    yield event
        finally:
            await bus.unmark(marker)
