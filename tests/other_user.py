"""Another OS user, for the tests that show the server and its clients refuse what it controls.

scripts/other-user.sh (run as root by scripts/test.sh) prepares, in the directory named by
``$LEARNEDIDX_TEST_OTHER_USER_DIR``, directories of that user (``open`` mode 0777, ``private``
0700, ``shared`` 0755) and a process of that user greeting like a learnedidx server on
``shared/accel.sock`` (mode 0777), which appends to ``shared/received`` how many bytes each
connection sent it.  Without it these tests skip.
"""
from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

import pytest


def other_user_dir() -> Path:
    """The prepared directory (skips the test when there is none)."""
    d = os.environ.get("LEARNEDIDX_TEST_OTHER_USER_DIR")
    if not d:
        pytest.skip("needs a second OS user: scripts/test.sh run as root prepares one "
                    "(scripts/other-user.sh, $LEARNEDIDX_TEST_OTHER_USER_DIR)")
    d = Path(d)
    assert (d / "open").stat().st_uid != os.geteuid(), "the other user's directory is this user's"
    assert (d / "shared" / "accel.sock").is_socket(), "the other user's listener is not running"
    return d


def other_user(d: Path) -> str:
    """The other user, as the server's messages name it."""
    uid = (d / "open").stat().st_uid
    return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"


def received(d: Path) -> list[int]:
    """Bytes each finished connection sent the other user's listener, in order."""
    return [int(n) for n in (d / "shared" / "received").read_text().split()]


def wait_received(d: Path, count: int, timeout: float = 60.0) -> list[int]:
    """:func:`received` once it lists ``count`` connections (the listener logs a connection
    when its client has closed it)."""
    deadline = time.monotonic() + timeout
    while len(got := received(d)) < count:
        assert time.monotonic() < deadline, f"the listener logged {len(got)} connections, not {count}"
        time.sleep(0.05)
    return got
