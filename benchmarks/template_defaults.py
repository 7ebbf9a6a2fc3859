"""Is a `tfrepro new --defaults` project healthy with all its features ON?

For each template: generate the defaults project, then judge its failing
configuration (every feature ON) against the baseline the way `tfrepro bisect`
does, with the real trial runner and classifier: nan / crash / timeout,
mismatch against the reference (the configuration with only its
`affects_loss` features on), and a sequential, interleaved timing comparison
for slowdown. `--features a,b` instead measures the median step-time ratio of
single features (one interleaved pair each, a rough number).

    .venv/bin/python benchmarks/template_defaults.py [--only tabular] [--features xla,mixed_precision]

Numbers are measured in one run on the machine at hand; nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tfrepro.project import Project  # noqa: E402
from tfrepro.scaffold.generate import new_project  # noqa: E402
from tfrepro.trials import classify  # noqa: E402
from tfrepro.trials.classify import measure_noise  # noqa: E402
from tfrepro.trials.runner import run_trial  # noqa: E402
from tfrepro.trials.slowdown import sequential_slowdown, timing_pair  # noqa: E402
from tfrepro.verdicts import Verdict  # noqa: E402


def judge_defaults(project: Project) -> dict[str, object]:
    settings = project.manifest.trial
    symptoms = project.manifest.symptoms
    every = frozenset(project.feature_names)
    base = [run_trial(project, (), dataclasses.replace(settings, repeat=r)) for r in range(2)]
    full = run_trial(project, every, settings)
    reference_set = every & project.affects_loss
    reference = run_trial(project, reference_set, settings) if reference_set else base[0]
    noise = measure_noise(base[0], base[1])
    verdict = classify.primary(classify.symptoms(full, reference=reference, settings=symptoms, noise=noise))

    def pair(i: int):  # B C B, as the bisect times a candidate
        before = run_trial(project, (), dataclasses.replace(settings, repeat=2 * i))
        c = run_trial(project, every, dataclasses.replace(settings, repeat=i))
        if c.nonfinite or c.crashed or c.timed_out:
            return Verdict.CRASH
        after = run_trial(project, (), dataclasses.replace(settings, repeat=2 * i + 1))
        return timing_pair(before, c, after) or Verdict.UNTESTABLE

    timing = sequential_slowdown(pair, symptoms.slowdown)
    return {
        "features": ",".join(sorted(every)),
        "verdict (nan/crash/mismatch)": verdict.value,
        "slowdown": timing.verdict.value,
        "conclusive": timing.conclusive,
        "step-time ratio": round(timing.ratio, 3) if timing.ratio else None,
        "pairs": len(timing.baseline),
        "noise": round(noise, 6),
    }


def feature_ratios(project: Project, names: list[str]) -> dict[str, float]:
    settings = project.manifest.trial
    out = {}
    for name in names:
        b = run_trial(project, (), settings)
        c = run_trial(project, {name}, settings)
        if c.crashed or c.nonfinite:
            out[name] = float("nan")
            continue
        out[name] = round(c.median_step_time() / b.median_step_time(), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=["image", "tabular", "sequence"])
    ap.add_argument("--features", help="Measure these single features' step-time ratios instead.")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tfrepro-defaults-") as tmp:
        for template in args.only or ["image", "tabular", "sequence"]:
            dest = Path(tmp) / template
            if args.features:
                new_project(dest, template=template, data={"features": args.features})
                ratios = feature_ratios(Project.load(dest), args.features.split(","))
                print(template, ratios, flush=True)
            else:
                new_project(dest, template=template, defaults=True)
                print(template, judge_defaults(Project.load(dest)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
