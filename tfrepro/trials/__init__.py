"""Running and judging one configuration (below every command).

- `values`     the facts of a trial (`TrialResult`), verdicts, the run result
- `classify`   what a trial shows against its reference (pure)
- `state`      the one owner of `.tfrepro/`: run dirs, trial dirs, the cache
- `runner`     one configuration -> a fresh process -> `TrialResult` (cached)
- `executors`  where trials run: local processes, or Ray (`ray_executor`)
"""
