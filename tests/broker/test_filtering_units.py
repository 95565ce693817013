"""The chunk bloom filter and the subscription matcher (Osiris' rules)."""

from __future__ import annotations

import pytest

from streamlet.broker.rabbitmq.filtering import matcher_from
from streamlet.core.filtering import Matcher, chunk_bloom


def test_no_filter_values_means_no_bloom() -> None:
    assert chunk_bloom(set(), 16) == b""
    assert chunk_bloom({None}, 16) == b""
    assert chunk_bloom({""}, 16) == b""


@pytest.mark.parametrize("size", [16, 32, 255])
def test_bloom_bits(size: int) -> None:
    only = chunk_bloom({"eu"}, size)
    assert len(only) == size
    assert not only[0] & 0x80  # bit 0: no entry without a filter value
    mixed = chunk_bloom({"eu", None}, size)
    assert mixed[0] & 0x80 and len(mixed) == size
    assert 1 <= sum(bin(b).count("1") for b in only) <= 2


def test_matcher() -> None:
    eu = chunk_bloom({"eu"}, 16)
    eu_and_plain = chunk_bloom({"eu", None}, 16)
    us = chunk_bloom({"us"}, 16)
    m = Matcher(["eu"], match_unfiltered=False)
    assert m.matches(eu) and m.matches(eu_and_plain)
    assert not m.matches(us)
    assert not m.matches(b"")  # a chunk without bloom only for match-unfiltered
    mu = Matcher(["asia"], match_unfiltered=True)
    assert mu.matches(b"") and mu.matches(eu_and_plain)
    assert not mu.matches(us)
    # a bloom of another size is hashed for its own size
    assert m.matches(chunk_bloom({"eu"}, 200)) and not m.matches(chunk_bloom({"us"}, 200))


def test_matcher_from_properties() -> None:
    assert matcher_from({}) is None
    assert matcher_from({"match-unfiltered": "true"}) is None  # rbfly without a filter
    m = matcher_from({"filter.0": "a", "filter.1": "b", "match-unfiltered": "true"})
    assert m is not None and m.values == ["a", "b"] and m.match_unfiltered
