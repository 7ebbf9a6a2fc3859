"""What a trial's memory is (Contract 3): its anonymous resident memory, the
same for a warm child forked from a server and for a cold process.

Real pages, no fakes (milliseconds): a file mapped and read (what
TensorFlow's shared libraries are to a trial) moves the reading by nothing,
the process's own allocations by their size, and a forked child reads what
its parent holds although the fork does not carry the file pages over (its
RSS is lower by all of them).
"""

from __future__ import annotations

import mmap
import os

import pytest

from tfrepro.inside import memory as sampler

MB = 1024 * 1024
SIZE = 64 * MB

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm (Linux)")


def _rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mapped_file(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(os.urandom(4096) * (SIZE // 4096))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    sum(m[i] for i in range(0, SIZE, 4096))  # fault every page in, as running a library's code does
    return m


def test_file_pages_do_not_count_and_own_allocations_do(tmp_path):
    s = sampler.MemorySampler()
    before, rss_before = s.rss(), _rss()
    m = _mapped_file(tmp_path)
    assert _rss() - rss_before > SIZE * 0.9  # resident...
    assert abs(s.rss() - before) < 8 * MB  # ...but not the trial's own memory
    own = bytearray(SIZE)
    own[::4096] = b"\1" * (SIZE // 4096)
    assert s.rss() - before > SIZE * 0.9
    s.step()
    got = s.result()
    assert got["peak_rss_bytes"] >= s.series[0] and got["extra"]["memory"]["measure"] == "anonymous resident"
    m.close()


def test_a_forked_child_reads_what_its_parent_holds(tmp_path):
    m = _mapped_file(tmp_path)
    held = bytearray(SIZE)
    held[::4096] = b"\1" * (SIZE // 4096)
    parent = sampler.MemorySampler()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the warm child: reads before touching anything
        try:
            child = sampler.MemorySampler()
            os.write(w, f"{child.rss()} {_rss()}".encode())
        finally:
            os._exit(0)
    os.close(w)
    child_anon, child_rss = (int(x) for x in os.read(r, 100).split())
    os.close(r)
    os.waitpid(pid, 0)
    assert _rss() - child_rss > SIZE * 0.9  # the fork left the file's pages behind
    assert abs(child_anon - parent.rss()) < 8 * MB  # the anonymous ones came along
    m.close()
    del held
