"""`streamlet serve --log-format json`: one JSON object a line (cli/logformat.py), and text
lines as before by default."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from streamlet.cli.logformat import JsonFormatter, formatter
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("streamlet.broker", logging.WARNING, __file__, 1, message, args,
                               exc_info)
    record.created = 1_700_000_000.123456
    return record


@pytest.mark.parametrize(("record", "expected"), [
    (_record("plain"), {"time": "2023-11-14T22:13:20.123Z", "level": "WARNING",
                        "logger": "streamlet.broker", "message": "plain"}),
    (_record("with %s and %d", "args", 3), {"message": "with args and 3"}),
    (_record('quotes " and\nnewline'), {"message": 'quotes " and\nnewline'}),
])
def test_a_json_line(record: logging.LogRecord, expected: dict[str, str]) -> None:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert expected.items() <= doc.items() and "exception" not in doc


def test_an_exception_goes_in_its_field() -> None:
    doc = json.loads(JsonFormatter().format(_record("failed", exc=True)))
    assert doc["message"] == "failed"
    assert "ValueError: boom" in doc["exception"] and "Traceback" in doc["exception"]


@pytest.mark.parametrize(("name", "kind"), [("json", JsonFormatter), ("text", logging.Formatter)])
def test_formatter(name: str, kind: type) -> None:
    assert type(formatter(name)) is kind


@pytest.mark.process
@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_a_broker_logs_in_the_format_asked(tmp_path: Path, log_format: str) -> None:
    broker = BrokerProcess(tmp_path / "d", extra_args=["--log-format", log_format]).start()
    try:
        await eventually(lambda: broker.log_text().strip(), what="a log line")
        lines = broker.log_text().strip().splitlines()
        if log_format == "json":
            docs = [json.loads(line) for line in lines]
            assert all({"time", "level", "logger", "message"} <= d.keys() for d in docs)
            assert any(d["logger"].startswith("streamlet") for d in docs)
        else:
            assert all(not line.startswith("{") for line in lines)
    finally:
        broker.stop()
