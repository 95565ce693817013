"""The data source's options, parsed once into a frozen, picklable value.

Spark hands options over as a case-insensitive mapping of strings; everything here is checked
where the query is planned, so a typo fails the query, not a task on an executor."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from streamlet.client.tls import pem_context

FORMATS = ("raw", "amqp")
PORT, TLS_PORT = 5552, 5551  # the broker's defaults: [listeners.rabbitmq] and [tls]
#: The TLS options naming PEM files, by the key they have in parse_options' mapping.
TLS_FILES = {"cacert": "caCert", "clientcert": "clientCert", "clientkey": "clientKey"}


@dataclass(frozen=True)
class Options:
    host: str = "127.0.0.1"
    port: int = 5552
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    stream: str | None = None
    super_stream: str | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "last"
    min_partitions: int = 1
    max_records_per_trigger: int | None = None
    format: str = "raw"
    publisher_reference: str | None = None
    consumer_reference: str | None = None
    batch_rows: int = 65536
    timeout: float = 30.0
    #: TLS: the files' text, read where the query is planned and pickled to the executors
    #: with the options (as the password is), so that only the driver needs the files
    tls: bool = False
    ca_cert: str | None = None  # None: the system's CAs
    client_cert: str | None = None
    client_key: str | None = field(default=None, repr=False)  # None: in client_cert

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's TLS context (None: plaintext); one per process and settings."""
        return _context(self.ca_cert, self.client_cert, self.client_key) if self.tls else None

    @property
    def target(self) -> str:
        """The stream or super stream named by the options (for messages)."""
        return self.stream or self.super_stream or "?"


@lru_cache(maxsize=8)
def _context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    return pem_context(ca, cert, key)


def _bool(opts: Mapping[str, str], key: str, name: str) -> bool:
    raw = opts.get(key, "false").strip().lower()
    if raw not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {opts[key]!r}")
    return raw == "true"


def _tls_files(opts: Mapping[str, str], tls: bool) -> dict[str, str | None]:
    """The text of the files caCert, clientCert and clientKey name (by lower-cased key), with
    the CLI's rules: each only with tls true (as --ca-cert, --cert, --key need --tls), and
    clientKey only with clientCert (the key may be in the clientCert file)."""
    given = [name for key, name in TLS_FILES.items() if opts.get(key)]
    if given and not tls:
        raise ValueError(f"option{'s' if len(given) > 1 else ''} {', '.join(given)}: only with "
                         f"tls true")
    if opts.get("clientkey") and not opts.get("clientcert"):
        raise ValueError("option clientKey: only with clientCert (the certificate it is for)")
    text: dict[str, str | None] = {}
    for key, name in TLS_FILES.items():
        path = opts.get(key)
        try:
            text[key] = Path(path).read_text(encoding="ascii") if path else None
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"option {name}: cannot read {path!r}: {e}") from None
    return text


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {key} must be >= {minimum}, not {value}")
    return value


def parse_options(raw: Mapping[str, str]) -> Options:
    """Parse Spark's options (keys compared case-insensitively)."""
    opts = {k.lower(): str(v) for k, v in raw.items()}
    stream, super_stream = opts.get("stream"), opts.get("superstream")
    if bool(stream) == bool(super_stream):
        raise ValueError("set exactly one of the options stream and superStream")
    fmt = opts.get("format", "raw").lower()
    if fmt not in FORMATS:
        raise ValueError(f"option format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    tls = _bool(opts, "tls", "tls")
    files = _tls_files(opts, tls)
    port = _int(opts, "port", TLS_PORT if tls else PORT, 1)
    min_partitions = _int(opts, "minpartitions", 1, 1)
    batch_rows = _int(opts, "batchrows", 65536, 1)
    assert port is not None and min_partitions is not None and batch_rows is not None
    parsed = Options(
        host=opts.get("host", "127.0.0.1"),
        port=port,
        user=opts.get("user", opts.get("username", "guest")),
        password=opts.get("password", "guest"),
        vhost=opts.get("vhost", "/"),
        stream=stream or None,
        super_stream=super_stream or None,
        starting_offsets=opts.get("startingoffsets") or None,
        ending_offsets=opts.get("endingoffsets") or "last",
        min_partitions=min_partitions,
        max_records_per_trigger=_int(opts, "maxrecordspertrigger", None, 1),
        format=fmt,
        publisher_reference=opts.get("publisherreference") or None,
        consumer_reference=opts.get("consumerreference") or None,
        batch_rows=batch_rows,
        timeout=float(opts.get("timeout", "30")),
        tls=tls,
        ca_cert=files["cacert"],
        client_cert=files["clientcert"],
        client_key=files["clientkey"],
    )
    if tls:  # a file that is no certificate or key fails here, not in every task
        try:
            parsed.ssl_context()
        except (ssl.SSLError, ValueError) as e:
            named = ", ".join(name for key, name in TLS_FILES.items() if files[key]) or "tls"
            raise ValueError(f"options {named}: do not load: {e}") from None
    return parsed
