"""Check custom resources against a CRD's openAPIV3Schema, the way the API server would.

jsonschema does the checking; first the Kubernetes extensions are turned into plain JSON
schema (int-or-string into anyOf, nullable into a null type, x-kubernetes-* dropped) and,
as the API server prunes unknown fields, objects without x-kubernetes-preserve-unknown-fields
refuse extra properties.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema


def to_jsonschema(node: Any) -> Any:
    if isinstance(node, list):
        return [to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("type") == "object" and "properties" in node and not node.get(
            "x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
        out["additionalProperties"] = False
    if out.get("format") in ("int64", "int32"):
        del out["format"]  # OpenAPI integer formats, not JSON schema ones
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]  # OpenAPI's nullable: null is a value too
    return out


def validate(obj: dict[str, Any], crd_schema: dict[str, Any]) -> None:
    schema = to_jsonschema(copy.deepcopy(crd_schema))
    # metadata is the API server's own; the schema only says it is an object.
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)
