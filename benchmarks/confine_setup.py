"""What entering the confinement costs a warm child, without a trial around it.

A process that has imported TensorFlow and Keras (as the warm server has)
forks, in alternation, a plain child and one that enters the active
mechanism's confinement (`inside/confine.enter` with the plan a trial gets:
for the overlay, the namespaces, the overlaid dirs and /proc; for Landlock,
the ruleset), `--reps` of each per round. Per child: the time from the fork
to its first line of "user code", and to its exit being reaped (the
namespace's teardown included). The figure is the median difference,
confined minus plain, side by side in one run, with the load average.

    PYTHONPATH=. .venv/bin/python benchmarks/confine_setup.py [--reps 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def _once(spec: dict | None) -> tuple[float, float]:
    from tfrepro.inside import confine as inside_confine

    r, w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if spec is not None:
            inside_confine.enter(spec)
        os.write(w, repr(time.perf_counter()).encode())
        os._exit(0)
    os.close(w)
    ready = float(os.read(r, 64) or "nan")
    os.close(r)
    os.waitpid(pid, 0)
    return ready - start, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import keras  # noqa: F401  (what a warm server holds)
    import tensorflow  # noqa: F401

    from tfrepro.trials import confine

    conf = confine.detect()
    trial = Path(tempfile.mkdtemp(prefix="tfrepro-confine-setup-"))
    (trial / "variant").mkdir()
    spec = confine.spec_for(conf, trial, also=[trial / "variant"])
    print(f"mechanism: {conf.describe() if hasattr(conf, 'describe') else conf.mode}")
    print(f"load average at start {os.getloadavg()}")
    plain, confined = [], []
    for _ in range(args.rounds):
        for _ in range(args.reps):
            plain.append(_once(None))
            confined.append(_once(spec))
    for name, xs in (("plain", plain), ("confined", confined)):
        ready, reaped = (statistics.median(x[i] for x in xs) * 1e3 for i in (0, 1))
        print(f"{name:9} fork to user code {ready:6.1f} ms, fork to reaped {reaped:6.1f} ms ({len(xs)} children)")
    extra = [c[1] - p[1] for p, c in zip(plain, confined)]
    print(f"confined - plain, to reaped: median {statistics.median(extra) * 1e3:+.1f} ms")
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
