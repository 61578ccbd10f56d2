"""Session 39, red team c: what the worker's "serving" line says."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest

from toolbus.worker import announce


@pytest.mark.parametrize("given", [
    "nats://alice:s3cret-pass@127.0.0.1:4222",  # user and password
    "nats://s3cret-token@127.0.0.1:4222",  # a token
    "tls://alice:s3cret-pass@10.0.0.1:4222,tls://alice:s3cret-pass@10.0.0.2:4222",  # before connecting: the url given
])
def test_attack_announce_keeps_credentials_out(given: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "serving" line went to stderr, a log, with the password or token the url carried (nats-py keeps
    the server's url as given); the Go side redacts (natsconn.Redact). The line now names the user, never
    a password or token."""
    first = given.split(",")[0]
    connected = urlparse(first) if given.count(",") == 0 else None
    w = SimpleNamespace(id="w1", _tools={"t": SimpleNamespace(rejected=False)}, nc=SimpleNamespace(connected_url=connected))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    announce(w, given)  # type: ignore[arg-type]
    line = err.getvalue()
    assert line.startswith("toolbus: worker w1 serving t on "), line
    assert "s3cret" not in line, line
    assert ("alice" in line) == ("alice" in given), line
