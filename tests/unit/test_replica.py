"""Session ids that name their replica, the server's replica identity and its settings."""

from __future__ import annotations

import pytest

from graphengine.api.session_ids import (
    check_replica_id,
    default_replica_id,
    new_session_id,
    owner_of,
)
from graphengine.engine.errors import NotFound, SessionElsewhere
from graphengine.server.config import ConfigError, load_config
from graphengine.server.core.manager import SessionManager
from graphengine.server.core.replica import Replica


def test_a_session_id_names_its_replica() -> None:
    sid = new_session_id("graphengine-sessions-2")
    assert sid.startswith("graphengine-sessions-2.") and len(sid.split(".")[1]) == 32
    assert owner_of(sid) == "graphengine-sessions-2"
    assert owner_of("0123abcd" * 4) is None          # an id without a replica (in process)
    assert owner_of("a b.c0ffee") is None            # not a replica id before the dot
    assert owner_of(".c0ffee") is None


@pytest.mark.parametrize("host, expected", [
    ("graphengine-sessions-0", "graphengine-sessions-0"),
    ("node7.cluster.example.com", "node7"),
    ("we!rd host", "we-rd-host"),
    ("---", "replica"),
    ("x" * 80, "x" * 63),
])
def test_default_replica_id_is_the_host_names_first_label(host: str, expected: str) -> None:
    assert default_replica_id(host) == expected
    assert check_replica_id(default_replica_id(host)) == expected


@pytest.mark.parametrize("bad", ["", "a.b", "-a", "a-", "a b", "x" * 64, "é"])
def test_bad_replica_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="replica id"):
        check_replica_id(bad)


def test_replica_addresses_and_the_elsewhere_error() -> None:
    r = Replica("ge-1", "{replica}.ge.default.svc:50051")
    assert r.address == "ge-1.ge.default.svc:50051"
    assert r.elsewhere(r.new_session_id()) is None
    assert r.elsewhere("no-replica-in-this-id") is None
    err = r.elsewhere("ge-0.0123")
    assert isinstance(err, SessionElsewhere) and isinstance(err, NotFound)
    assert (err.replica, err.address) == ("ge-0", "ge-0.ge.default.svc:50051")
    assert "held by replica 'ge-0' at ge-0.ge.default.svc:50051" in str(err)
    assert "this replica 'ge-1'" in str(err)
    assert Replica("solo").elsewhere("ge-0.0123").address is None


@pytest.mark.parametrize("fmt", ["ge.svc:50051", "{replica}.{ns}:1", "{replica}{replica}",
                                 "{replica} x:1", "{" + "replica}" + "x" * 300])
def test_bad_address_formats_are_refused(fmt: str) -> None:
    with pytest.raises(ValueError, match="address format"):
        Replica("r", fmt)


def test_settings_are_checked_and_named(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("replica_id: ge-3\nreplica_address_format: '{replica}.ge:50051'\n")
    c = load_config(path, environ={})
    assert (c.replica_id, c.replica_address_format) == ("ge-3", "{replica}.ge:50051")
    with pytest.raises(ConfigError, match="replica_id: replica id 'a.b'"):
        load_config(None, replica_id="a.b")
    with pytest.raises(ConfigError, match="replica_address_format: .*must hold"):
        load_config(None, replica_address_format="ge:50051")


def test_the_manager_names_the_owner_of_anothers_session() -> None:
    manager = SessionManager(replica=Replica("ge-1", "{replica}.ge:50051"))
    try:
        mine = manager.create()
        assert owner_of(mine.id) == "ge-1"
        assert manager.get(mine.id) is mine
        with pytest.raises(SessionElsewhere) as caught:
            manager.get("ge-2.00ff")
        assert (caught.value.replica, caught.value.address) == ("ge-2", "ge-2.ge:50051")
        # This replica's own unknown id, and another identity's session: plain NOT_FOUND.
        for sid, owner in (("ge-1.00ff", None), (mine.id, "mallory")):
            with pytest.raises(NotFound) as plain:
                manager.get(sid, owner)
            assert not isinstance(plain.value, SessionElsewhere) and plain.value.replica is None
    finally:
        manager.close_all()
