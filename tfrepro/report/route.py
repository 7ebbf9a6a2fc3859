"""Where the bug belongs: TensorFlow, Keras 3 or tf_keras (pure).

Keras 3 lives in keras-team/keras, the Keras 2 line (`tf_keras`,
TF_USE_LEGACY_KERAS=1) in keras-team/tf-keras; everything else goes to
tensorflow/tensorflow. The decision reads evidence only, strongest first:

1. `follows`, set by a version bisect: the symptom moves with the Keras
   version ("keras") or with the TensorFlow one ("tensorflow");
2. the culprit switches between tf_keras and Keras 3 (the diff that turns
   it on adds or removes `TF_USE_LEGACY_KERAS` / `import tf_keras`): the
   behaviour differs between the two Keras lines;
3. a crash whose innermost frame is in the `keras` (or `tf_keras`) package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfrepro.report.answer import Report
from tfrepro.report.scan import LEGACY_KERAS
from tfrepro.trials.values import TrialResult

TENSORFLOW = "tensorflow/tensorflow"
KERAS = "keras-team/keras"
TF_KERAS = "keras-team/tf-keras"

_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+', re.MULTILINE)


@dataclass(frozen=True)
class Route:
    repo: str
    reason: str

    @property
    def keras(self) -> bool:
        return self.repo != TENSORFLOW

    @property
    def new_issue_url(self) -> str:
        return f"https://github.com/{self.repo}/issues/new"


def route(r: Report) -> Route:
    """The repository to file the report in, and why."""
    legacy = "tf_keras" in (r.setup.keras_flavour or "")
    keras_repo = TF_KERAS if legacy else KERAS
    follows = r.follows
    if follows == "keras":
        return Route(keras_repo, "a version bisect found that the symptom follows the Keras version")
    if follows == "tensorflow":
        return Route(TENSORFLOW, "a version bisect found that the symptom follows the TensorFlow version")
    switch = _keras_switch(r.repro.diff or "")
    if switch == "tf_keras":
        return Route(TF_KERAS, "the symptom appears when the culprit switches from Keras 3 to tf_keras")
    if switch == "keras":
        return Route(KERAS, "the symptom appears when the culprit switches from tf_keras to Keras 3")
    package = crash_package(r)
    if package:
        return Route(
            TF_KERAS if package == "tf_keras" else KERAS, f"the crash is raised inside the `{package}` package"
        )
    return Route(TENSORFLOW, "nothing points at Keras rather than TensorFlow")


def _keras_switch(diff: str) -> str | None:
    """ "tf_keras" when the culprit's diff turns tf_keras on, "keras" when it
    turns it off (back to Keras 3), None when it does neither."""
    lines = diff.splitlines()
    added, removed = ("\n".join(x[1:] for x in lines if x[:1] == c and x[:3] != c * 3) for c in "+-")
    on, off = bool(LEGACY_KERAS.search(added)), bool(LEGACY_KERAS.search(removed))
    if on != off:
        return "tf_keras" if on else "keras"
    return None


def crash_package(r: Report) -> str | None:
    """`keras` or `tf_keras` when a crash's innermost traceback frame lies in
    that package, else None."""
    if r.symptom != "crash":
        return None
    for t in (r.culprit or TrialResult(), r.rerun.trial or TrialResult()):
        frames = _FRAME.findall(str(t.error_detail or ""))
        if frames:
            parts = frames[-1].replace("\\", "/").split("/")
            for i, part in enumerate(parts[1:-1], 1):  # an installed package: .../site-packages/keras/...
                if part in ("keras", "tf_keras") and parts[i - 1] in ("site-packages", "dist-packages"):
                    return part
            return None
    return None
