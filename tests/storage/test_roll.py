"""A segment roll that fails (disk full, out of descriptors) leaves the log writable,
and the next write tries the roll again."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.storage import LogConfig, StreamLog
from streamlet.storage.chunk import simple_entry
from tests.support.reading import log_records


def _failing_open(suffix: str, err: int) -> Callable[..., int]:
    real_open = os.open

    def fake(path: object, flags: int, mode: int = 0o777, **kw: object) -> int:
        if str(path).endswith(suffix) and flags & os.O_CREAT:
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, mode, **kw)  # type: ignore[arg-type]

    return fake


@pytest.mark.parametrize("suffix", [".segment", ".index"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EMFILE])
def test_a_roll_that_fails_leaves_the_log_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, err: int) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        log.append(simple_entry(b"a"), 1, 1, writer_sequences={"p": 1})
        log.append(simple_entry(b"b"), 1, 1, writer_sequences={"p": 2})
        with monkeypatch.context() as m:
            m.setattr(os, "open", _failing_open(suffix, err))
            for _ in range(3):  # each write tries the roll again, and fails the same way
                with pytest.raises(OSError) as e:
                    log.append(simple_entry(b"lost"), 1, 1, writer_sequences={"p": 3})
                assert e.value.errno == err
        assert log.segment_count == 1 and log.next_offset == 2
        assert sorted(p.name for p in d.iterdir()) == [f"{0:020d}.index", f"{0:020d}.segment"]
        # space again: the next write rolls, as if nothing had happened
        ref = log.append(simple_entry(b"c"), 1, 1, writer_sequences={"p": 3})
        assert ref.segment == 2 and log.segment_count == 2
        log.append(simple_entry(b"d"), 1, 1, writer_sequences={"p": 4})
        assert log_records(log) == [b"a", b"b", b"c", b"d"]
    with StreamLog(d, cfg) as log:
        assert log_records(log) == [b"a", b"b", b"c", b"d"]
        assert log.writer_sequences == {"p": 4}
