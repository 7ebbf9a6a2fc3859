"""Pids a trial script writes down, seen from outside its PID namespace.

A confined trial (trials/confine.py, overlay) runs in its own PID namespace:
`os.getpid()` there is not the pid this test process sees. The kernel lists
both in /proc/PID/status (`NSpid: <host> ... <innermost>`); the trial's cwd
tells its processes from those of other namespaces.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def host_pids(ns_pids: Iterable[int], under: Path) -> list[int]:
    """The live processes whose own-namespace pid is one of `ns_pids` and
    whose cwd is `under` or below it (outside any namespace: the same pids)."""
    wanted, root, out = set(ns_pids), str(Path(under).resolve()), []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            nspid = [int(x) for x in fields["NSpid"].split()]
            cwd = os.readlink(status.parent / "cwd")
        except (OSError, KeyError, ValueError):
            continue
        if fields.get("State", "").strip().startswith("Z"):
            continue
        if nspid[-1] in wanted and (cwd == root or cwd.startswith(root + "/")):
            out.append(nspid[0])
    return sorted(out)
