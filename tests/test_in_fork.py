"""``conftest.in_fork``, the helper that runs a test's command in a forked child: what it returns,
what the child prints, its exit statuses, and a child that hangs is killed."""

from __future__ import annotations

import os
import sys
import time

from conftest import in_fork


def _registers_and_prints(value):
    sys.modules[__name__].REGISTERED = value  # stays in the child
    print("out", value)
    print("err", value, file=sys.stderr)
    return {"pid": os.getpid(), "value": value}


def test_the_child_returns_prints_and_keeps_what_it_changes():
    status, result, out, err = in_fork(_registers_and_prints, 7)
    assert status == 0 and result["value"] == 7 and result["pid"] != os.getpid()
    assert out == "out 7\n" and err == "err 7\n"
    assert not hasattr(sys.modules[__name__], "REGISTERED")


def _exits(code):
    sys.exit(code)


def _raises():
    raise ValueError("no such scheme")


def test_exit_codes_and_exceptions_are_the_status():
    assert in_fork(_exits, 2)[:2] == (2, None)
    status, result, _, err = in_fork(_raises)
    assert (status, result) == (1, None) and "ValueError: no such scheme" in err


def test_a_child_that_hangs_is_killed():
    start = time.monotonic()
    status, result, _, err = in_fork(time.sleep, 60, timeout=0.3)
    assert status == -9 and result is None and "killed after 0.3 s" in err
    assert time.monotonic() - start < 10
