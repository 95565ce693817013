"""Which local streams a new stream directory seals (moved away) and unseals (moved back)."""

from __future__ import annotations

from streamlet.broker.directory import Directory, Placement, seal_changes

HERE = ("b-1", 5552)
OTHER = ("b-0", 5552)


def d(**streams: tuple[str, int]) -> Directory:
    return Directory(streams=dict(streams))


def test_a_switch_to_another_broker_seals_and_back_here_unseals() -> None:
    held = ["s", "t"]
    assert seal_changes(d(s=HERE, t=HERE), d(s=OTHER, t=HERE), "/", held, HERE) == (
        {"s"}, {"t"})
    assert seal_changes(d(s=OTHER), d(s=HERE), "/", held, HERE) == (set(), {"s"})


def test_only_a_change_seals_so_a_moves_new_stream_takes_the_copy() -> None:
    # The new pod holds the stream while the directory still names the old pod.
    assert seal_changes(d(s=OTHER), d(s=OTHER, x=OTHER), "/", ["s"], HERE) == (set(), set())
    assert seal_changes(None, d(s=OTHER), "/", ["s"], HERE) == ({"s"}, set())  # after a restart
    assert seal_changes(d(), d(s=OTHER), "/", ["s"], HERE) == ({"s"}, set())


def test_an_entry_that_disappears_changes_nothing_and_vhosts_are_keyed() -> None:
    assert seal_changes(d(s=HERE), d(), "/", ["s"], HERE) == (set(), set())
    directory = Directory(streams={"v/s": OTHER})
    assert seal_changes(d(), directory, "v", ["s"], HERE) == ({"s"}, set())
    assert seal_changes(d(), directory, "/", ["s"], HERE) == (set(), set())


def test_a_replicated_stream_is_never_sealed_by_the_directory() -> None:
    """Its leader changes by elections (epochs, fencing), not by moves."""
    replicated = Directory(replicated={"s": Placement(2, OTHER, (HERE,))})
    assert seal_changes(d(s=HERE), replicated, "/", ["s"], HERE) == (set(), set())
    assert seal_changes(None, replicated, "/", ["s"], HERE) == (set(), set())
