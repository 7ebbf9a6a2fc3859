"""The replay of the answer (part of `engine._Bisection`), sized by its
evidence: the one-run replay of a deterministic symptom seen to be
deterministic, the full replay (`replays` fresh runs of the culprit
configuration and of the baseline) for everything else, the flaky rule
(`judge_replay`), and the slowdown's fresh pairs and minimal set."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tfrepro.trials.ddmin import Config
from tfrepro.trials.trial import Purpose
from tfrepro.trials.values import RunResult, Status, TrialResult
from tfrepro.verdicts import Verdict

# A custom layer's OFF part is a stand-in that does less work (Identity, a
# stock layer), so the layer is slower than it by its own compute: healthy.
# Without --symptom, a slowdown whose culprits are all custom layers counts
# only past this ratio ("several times slower"; keras-io's antirectifier is
# 1.56x its Identity on an AVX-512 CPU). `--symptom slowdown` hunts it at the
# plain threshold.
OWN_COST_SLOWDOWN = 3.0
# A slowdown that only COMBINED_FEATURES or more features show together (the
# search's 1-minimal set: no smaller set is slower) and under the same
# "several times slower" is their combined overhead, each feature's share
# (a checkpoint write, a logger, a pipeline's threads on a shared CPU) too
# small to be slower alone: not a defect of any of them. The journey's healthy
# script (7 features, x1.40 under load, J6) was answered "slowdown <- all 7".
# `--symptom slowdown` hunts it at the plain threshold.
COMBINED_FEATURES = 4
# A smaller set of slowdown culprits under the same x3 whose members, each
# timed alone, explain at least PARTS_SHARE of its log-slowdown is their
# combined overhead as well: costs that add up (journey J19 on an AMD Zen 3:
# mixed_precision 1.13x and an EarlyStopping callback 1.03x alone, 1.30x
# together, answered as a pair). An interaction (slower only together) is
# still a pair of culprits.
PARTS_SHARE = 0.5
# How a combined overhead's reason ends (`_features_cost`).
_COMBINED = (
    ": their combined overhead, not a defect of any one (a slowdown of "
    f"{COMBINED_FEATURES} or more features together counts from x{OWN_COST_SLOWDOWN:g}; "
)


@dataclass(frozen=True)
class ReplayJudgement:
    """Whether a found answer stands up to repeated runs.

    `reproduction_rate` is the fraction of the culprit configuration's trials
    that showed the symptom (None when it has none)."""

    flaky: bool
    reproduction_rate: float | None
    reason: str = ""


def judge_replay(culprit: Sequence[bool], baseline: Sequence[bool] = ()) -> ReplayJudgement:
    """The replay rule, stated once.

    `culprit` holds, for every trial of the culprit configuration (those the
    search saw and the replays with fresh repeat indices), whether it showed
    the symptom; `baseline` the same for the baseline's trials. The answer
    stands only if every culprit trial shows the symptom and no baseline trial
    does. Anything else means the search took its decisions on outcomes that
    do not repeat, so it may not name a culprit: the failure is flaky, with the
    observed rate. (With `repeats` > 1 the search counts a configuration as
    failing when any repeat fails; that lets it *find* a flaky culprit, but the
    answer is still reported as flaky.)
    """
    rate = (sum(culprit) / len(culprit)) if culprit else None
    missed = sum(1 for t in culprit if not t)
    base_hits = sum(1 for t in baseline if t)
    if not culprit or missed:
        return ReplayJudgement(
            True, rate, f"the culprit configuration did not show it in {missed} of {len(culprit)} runs"
        )
    if base_hits:
        return ReplayJudgement(True, rate, f"the baseline showed it in {base_hits} of {len(baseline)} runs")
    return ReplayJudgement(False, rate)


def _same_outcome(a: TrialResult, b: TrialResult) -> bool:
    """Two runs of one configuration came out bit-identical: the same losses
    (NaN equal to NaN), first non-finite step, crash and crash line."""
    got_a, got_b = ((len(t.losses), t.first_nonfinite_step, t.crashed, t.error, t.timed_out) for t in (a, b))
    return got_a == got_b and all(x == y or (x != x and y != y) for x, y in zip(a.losses, b.losses))


class Replay:
    def _replay(self, target: Verdict, culprits: Config, config: Config, table: dict[str, Verdict] | None) -> RunResult:
        self.events.phase("replaying the answer")
        if target == Verdict.SLOWDOWN:
            # Each decision re-judges all the evidence so far: the replay's
            # observations are the decisions made from here on (the search's
            # own may be the very one a fresh look overturns).
            seen = {c: len(v) for c, v in self.timing.items()}
            culprits = config = self._minimal_slowdown(culprits)
            self._timed(config, fresh=max(1, self.opts.timing_replays))
            culprit_obs = [t.verdict == target for t in self.timing[config][seen.get(config, 0) :]]
            base_obs: list[bool] = []
        else:
            culprit_obs, base_obs, runs = self._replayed(target, culprits, config, self._fresh())
        judged = judge_replay(culprit_obs, base_obs)
        if not judged.flaky and target != Verdict.SLOWDOWN and (why := self._unneeded(target, culprits, config, runs)):
            judged = replace(judged, flaky=True, reason=why)
        extra = {"ablation": {f: v.value for f, v in table.items()} if table else None}
        cost = self._features_cost(culprits, config, repeated=not judged.flaky) if target == Verdict.SLOWDOWN else None
        # None of the replay's fresh pairs found the search's set slower: what stands is the
        # failing configuration with its own slowdown, a combined overhead when it has
        # COMBINED_FEATURES or more features. Journey J31 (Intel Xeon, `healthy`: seven features
        # x1.43; prefetch alone judged slower from one pair under load, never again in nine).
        if cost is None and target == Verdict.SLOWDOWN and judged.flaky and not any(culprit_obs):
            cost = self._features_cost(frozenset(self.features), frozenset(self.features), overturned=config)
        if cost is not None:
            key, doc = cost
            return self._finish(Status.NONE, None, extra={**extra, key: doc}, reason=doc["reason"])
        if judged.flaky:
            return self._finish(
                Status.FLAKY,
                target,
                suspects=config,
                rate=judged.reproduction_rate,
                extra=extra,
                error=f"the {target.value} is flaky: {judged.reason}; no culprit is named. "
                "Raise [trial] repeats (or --repeats) to hunt it with more runs "
                "per configuration.",
            )
        return self._finish(
            Status.FOUND, target, culprits=culprits, config=config, rate=judged.reproduction_rate, extra=extra
        )

    def _one_run_replay_applies(self, target: Verdict) -> bool:
        """Whether determinism can stand for the full replay (`_replayed`)."""
        return target != Verdict.MEMORY and self.settings.deterministic and self.noise == 0

    def _fresh(self) -> range:
        """The replay's fresh repeat indices (apart from the search's and the baselines')."""
        return range(max(self.k, 2), max(self.k, 2) + self.opts.replays)

    def _features_cost(
        self, culprits: Config, config: Config, *, repeated: bool = True, overturned: Config | None = None
    ) -> tuple[str, dict] | None:
        """A slowdown found without --symptom that is a cost, not a defect (see
        OWN_COST_SLOWDOWN, COMBINED_FEATURES, PARTS_SHARE): result.json's key for
        it (`own_cost`: all custom layers; else `combined_cost`) and what it says
        under it, the reason the answer is `none`.
        Not `repeated` (the replay did not show it again: flaky): the same for
        the configuration the search ended on, its parts never timed anew
        (a cost that does not even repeat is no defect either, journey J29).
        `overturned`: the smaller set the search ended on (see `_replay`)."""
        from tfrepro import catalog

        if self.opts.symptom is not None or not culprits or overturned == culprits:
            return None
        if overturned is not None and len(culprits) < COMBINED_FEATURES:
            return None
        own = all((e := catalog.get(c)) is not None and e.kind == "custom_layer" for c in culprits)
        outcomes = self.timing.get(config) or []
        ratio = outcomes[-1].ratio if outcomes else None
        if ratio is None or ratio >= OWN_COST_SLOWDOWN:
            return None
        few = not own and len(culprits) < COMBINED_FEATURES  # a cost only when their costs add up (`alone`)
        alone = self._costs_add_up(culprits, ratio) if few and repeated else None
        if few and alone is None:
            return None
        names = ", ".join(sorted(culprits))
        if overturned is not None:
            reason = (
                f"the {len(culprits)} features together ({names}) are slower, x{round(ratio, 3):.2f}, and the "
                f"smaller set the search ended on ({', '.join(sorted(overturned))}) was not slower in any of the "
                f"replay's fresh pairs{_COMBINED}"
            )
        elif alone is not None:
            each = ", ".join(f"{c} x{r:.2f}" for c, r in sorted(alone.items()))
            reason = (
                f"{names} are x{ratio:.2f} slower together and each alone is slower by part of it ({each}): "
                "their costs add up, no interaction and no defect of any one (a set whose parts alone "
                f"explain {PARTS_SHARE:.0%} of its slowdown counts from x{OWN_COST_SLOWDOWN:g}; "
            )
        elif own:
            reason = (
                f"{names} is x{ratio:.2f} slower than its OFF stand-in, which does less work: the layer's "
                f"own compute, not a defect (a custom layer counts from x{OWN_COST_SLOWDOWN:g}; "
            )
        else:
            reason = (
                f"only the {len(culprits)} features together ({names}) are slower, x{ratio:.2f}, and no "
                f"smaller set of them is{_COMBINED}"
            )
        reason += "rerun with --symptom slowdown to hunt it anyway)"
        if not repeated:
            reason = f"{reason}; and it did not repeat: the replay's fresh pairs were not slower"
        doc = {"features": sorted(culprits), "ratio": round(ratio, 3), "reason": reason}
        if alone is not None:
            doc["alone"] = {c: round(r, 3) for c, r in sorted(alone.items())}
        return ("own_cost" if own else "combined_cost"), doc

    def _costs_add_up(self, culprits: Config, ratio: float) -> dict[str, float] | None:
        """Each culprit's ratio alone (timed now when the search did not),
        when together they explain at least PARTS_SHARE of the set's
        log-slowdown: costs that add up, not an interaction. Else None."""
        if len(culprits) < 2 or ratio <= 1:
            return None
        alone: dict[str, float] = {}
        for c in sorted(culprits):
            got = self.timing.get(frozenset({c})) or [self._timed(frozenset({c}), search=True)]
            if got[-1].ratio is None:
                return None
            alone[c] = got[-1].ratio
        explained = sum(math.log(max(r, 1.0)) for r in alone.values())
        return alone if explained >= PARTS_SHARE * math.log(ratio) else None

    def _replayed(
        self, target: Verdict, culprits: Config, config: Config, fresh: range
    ) -> tuple[list[bool], list[bool], range]:
        """The replay's observations (culprit side, baseline side), as many
        fresh runs as the evidence needs, and the fresh repeats it took.

        The search's own trials are selected (it ended on `config` because
        they showed the symptom), so they cannot stand for fresh runs. What can
        is determinism, seen: under deterministic settings, with the two
        baselines bit-identical, a run of the whole evidence consistent (every
        trial holding `config` showed the symptom, none without the culprits
        did) and one fresh run of `config` identical to the search's (losses,
        first non-finite step, crash line), the symptom is a function of the
        configuration, and that one run is the replay. Anything else (a fresh
        run that differs, any inconsistency, a memory hunt, non-deterministic
        settings) gets the full replay: `replays` fresh runs of the culprit
        configuration and of the baseline, as the flaky rule needs."""
        with self.lock:
            memo = list(self.memo.items())
        shown = [(c, target in self._shows(c, t)) for (c, _r), t in memo]
        hits = [s for c, s in shown if config <= c]  # the whole evidence: the trials holding `config`,
        clean = [s for c, s in shown if not config <= c and not culprits <= c]  # those without the culprits
        seen = [self.memo[(config, r)] for r in range(self.k) if (config, r) in self.memo]
        consistent = hits and all(hits) and not any(clean)
        if consistent and self._one_run_replay_applies(target) and seen:
            first = fresh.start
            ahead = (config, first) in self.memo  # run beside the search's last pair (engine._test_final)
            self._many(self._needs(config, [first], Purpose.REPLAY, target))
            again = self.memo[(config, first)]
            if all(_same_outcome(again, t) for t in seen) and target in self._shows(config, again):
                return (hits if ahead else [*hits, True]), clean, range(first, first + 1)
        self._many(
            self._needs(config, fresh, Purpose.REPLAY, target)
            + [(frozenset(), r, Purpose.REPLAY_BASELINE) for r in fresh]
        )
        runs = [*range(self.k), *fresh]
        culprit_obs = [target in self._shows(config, self.memo[(config, r)]) for r in runs]
        base_runs = [*range(max(self.k, 2)), *fresh]
        base_obs = [target in self._shows(frozenset(), self.memo[(frozenset(), r)]) for r in base_runs]
        return culprit_obs, base_obs, fresh

    def _unneeded(self, target: Verdict, culprits: Config, config: Config, runs: range) -> str | None:
        """Several culprits of a NaN, crash, timeout or mismatch: each one's
        necessity seen again, in as many fresh runs of the culprit
        configuration without it as the replay took (`runs`). The search
        judged each of those sets from its own trials: a flaky symptom that
        missed one of them kept a bystander among the culprits. A symptom
        that shows without a culprit in a fresh run does not repeat as the
        search saw it: the reason the answer is flaky, else None. A
        deterministic pair costs one trial per culprit."""
        if len(culprits) < 2 or target == Verdict.MEMORY:
            return None
        without = {c: frozenset(config - {c}) for c in sorted(culprits)}
        self.events.phase(f"replaying: is each of {', '.join(without)} needed for the {target.value}?")
        self._many([w for cfg in without.values() for w in self._needs(cfg, runs, Purpose.REPLAY_WITHOUT, target)])
        for c, cfg in without.items():
            shown = sum(target in self._shows(cfg, self.memo[(cfg, r)]) for r in runs)
            if shown:
                return f"it showed without {c} in {shown} of {len(runs)} fresh runs (the search kept {c} as needed)"
        return None

    def _minimal_slowdown(self, culprits: Config) -> Config:
        """A timing decision near the threshold can wrongly keep a bystander
        in a set of slowdown culprits (its removal judged "not slower" once).
        Each culprit's necessity is checked again with fresh pairs added to
        the evidence of the set without it; a set that is slower without a
        culprit (by SEARCH_SHARE of the failing configuration's slowdown, as
        in the search) loses it, and the smaller set is checked again."""
        for c in sorted(culprits) if len(culprits) > 1 else ():
            without = frozenset(culprits - {c})
            self.events.phase(f"replaying: is {c} needed for the slowdown?")
            got = self._timed(without, fresh=max(1, self.opts.timing_replays), explains=True)
            if got.verdict == Verdict.SLOWDOWN:
                return self._minimal_slowdown(without)
        return culprits
