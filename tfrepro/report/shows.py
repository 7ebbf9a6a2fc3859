"""The bundle's repro.py says what it shows: a last line, printed by a few
lines appended to it, stating whether the run's symptom was seen.

A script that trains with `verbose=0` prints nothing: a maintainer running
`python repro.py` could not tell a NaN from a healthy run. The footer checks
what a plain process can see, without tfrepro:

- nan: every Keras model still alive (`gc`) for a non-finite loss in its
  `history` or a non-finite weight: "symptom seen" or "NOT seen";
- crash: reaching the end means the crash did not happen (when it does,
  its traceback is the last thing printed and the footer never runs);
- slowdown, memory, mismatch: the process's CPU time, its peak memory, the
  last loss of each model's history, next to the run's numbers: one
  process cannot judge those alone, the line says to compare with the
  reference (reference.py, or reference/repro.py).

The footer never raises (a failure prints why it could not check). Its
lines are all marked `(tfrepro)`; the trial harness ends a trial before it
at the step cap, and when a short script reaches it, it only prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfrepro.report.export import REFERENCE

BEGIN = "# ---- (tfrepro) what this run shows: the last line it prints ----\n"

_BODY = """\
def _tfrepro_shows():
    import gc, math, resource, sys
    try:
        kinds = tuple(m.Model for m in (sys.modules.get("keras"), sys.modules.get("tf_keras")) if m and hasattr(m, "Model"))
        models = [o for o in gc.get_objects() if kinds and isinstance(o, kinds)]
        bad, last = [], []
        for m in models:
            losses = [float(x) for x in ((getattr(getattr(m, "history", None), "history", None) or {}).get("loss") or [])]
            if losses:
                last.append(f"{m.name} {losses[-1]:.6g}")
            if any(not math.isfinite(x) for x in losses):
                bad.append(f"the loss of {m.name}")
            elif any(not __import__("numpy").isfinite(w).all() for w in m.get_weights()):
                bad.append(f"the weights of {m.name}")
        use = resource.getrusage(resource.RUSAGE_SELF)
        peak = use.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
        facts = f"{len(models)} Keras model(s); last loss: {', '.join(last) or '-'}; CPU {use.ru_utime + use.ru_stime:.1f} s; peak memory {peak:.0f} MB"
        print("(tfrepro) " + SAY(bad, facts), flush=True)
    except Exception as e:  # noqa: BLE001 - the footer only reports
        print(f"(tfrepro) could not check what this run shows ({type(e).__name__}: {e})", flush=True)


_tfrepro_shows()
"""


def _say(symptom: str, result: Mapping[str, Any], reference: str) -> str:
    """The expression (over `bad` and `facts`) the footer prints: the run's facts in it."""
    failing = result.get("culprit_trial") or result.get("failing") or {}
    culprits = ", ".join(result.get("culprits") or []) or "the culprits"
    if symptom == "nan":
        step = failing.get("first_nonfinite_step")
        ran = f"the run saw it at step {step}" if step else "the run saw it"
        return (
            f"(f\"symptom seen: NaN/Inf in {{', '.join(bad)}} ({ran}; {{facts}})\" if bad "
            f'else f"symptom NOT seen: no NaN/Inf in any Keras model\'s loss or weights ({ran}; {{facts}})")'
        )
    if symptom == "crash":
        error = str(failing.get("error") or "a crash").replace("\\", "\\\\").replace('"', '\\"').replace("{", "{{")
        error = error.replace("}", "}}")[:200]
        return f'f"symptom NOT seen: it ran to its end without the run\'s crash ({error}; {{facts}})"'
    what = {"slowdown": "slower per step", "memory": "more memory", "mismatch": "a different loss"}.get(
        symptom, symptom
    )
    return (
        f"f\"ran to its end ({{facts}}); the run's symptom: {symptom} ({what} with {culprits}): "
        f'compare with python {reference}"'
    )


def with_footer(text: str, symptom: str, result: Mapping[str, Any], reference: str = REFERENCE) -> str:
    """`text` with the footer (the lines appended to repro.py, see the module doc) at its end, the run's facts in
    it; `reference`: where the bundle's reference lies (`Export.ref_name`)."""
    body = text if text.endswith("\n") or not text else text + "\n"
    return body + "\n\n" + BEGIN + _BODY.replace("SAY(bad, facts)", _say(symptom, result, reference))
