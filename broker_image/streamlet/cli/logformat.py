"""How `streamlet serve` writes its log lines (to stderr): ``text``, the default, or ``json``,
one JSON object a line with ``time`` (UTC, RFC 3339, milliseconds), ``level``, ``logger`` and
``message``, and ``exception`` (the traceback) when there is one: what log collectors parse
without a pattern. Standard library only: imported when serve runs."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

#: what --log-format takes
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        doc: dict[str, str] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def configure(level: str, log_format: str = "text") -> None:
    """The root logger at ``level``, its lines in ``log_format``, to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level.upper(), handlers=[handler])
