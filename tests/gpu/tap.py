"""TAP output for the Python GPU tests: ok(cond, what) prints one numbered line; finish() the
plan line last and the exit status (1 when any failed)."""
import os
import sys

# the kiln Python package of this checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

_n = 0
_failed = 0


def ok(cond, what):
    global _n, _failed
    _n += 1
    _failed += 0 if cond else 1
    print("%s %d - %s" % ("ok" if cond else "not ok", _n, what), flush=True)


def finish():
    print("1..%d" % _n)
    return 1 if _failed else 0
