"""Custom training loops: the trial's sys.stdout, tapped for step lines.

Loaded by harness.py (`_bound`) when the harness activates; stdlib only.

A line `step=<int> loss=<float>` written to sys.stdout (Python level:
`print`, not `tf.print`) is one step of a custom loop; its step time is the
time since the previous one was recorded (the first: since TensorFlow
finished importing; `H.loop_step`). Lines written inside `Model.fit` are not steps (fit is measured
by harness_keras.py). Everything is passed through to the real stream
unchanged.
"""

from __future__ import annotations

import re
import sys

STEP_LINE = re.compile(r"^\s*step=(-?\d+)\s+loss=(\S+)")
_MAX_PENDING_LINE = 4096
H = None  # the harness core module, set by harness.py


class StdoutTap:
    """sys.stdout proxy that parses `step=<int> loss=<float>` lines."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, s):
        n = self._stream.write(s)
        if H.S.fit_depth == 0 and isinstance(s, str):
            if "\n" not in s:
                if len(self._pending) < _MAX_PENDING_LINE:
                    self._pending += s
                return n
            *lines, self._pending = (self._pending + s).split("\n")
            for line in lines:
                m = STEP_LINE.match(line)
                if m:
                    self._on_step_line(m.group(2))
        return n

    def _on_step_line(self, text: str) -> None:
        try:
            loss = float(text.rstrip(",;"))
        except ValueError:
            return
        loop = sys.modules.get("_tfrepro_harness_loop")
        if loop is not None:  # the printed line overrides the steps seen at apply_gradients
            loop.yield_to_stdout()  # (and its time starts where theirs did)
        self._stream.flush()
        H.loop_step(loss)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)
