"""The searches and the bisections built on them.

- `search`, `rangesearch`  pure: feature sets (ablation, ddmin), ordered ranges
- `engine`                 feature bisection (`tfrepro bisect PATH`)
- `commits`, `gitcopy`     commit bisection (`--good/--bad`), read-only checkouts
- `display`                live progress and the final table

A subpackage on purpose: a top-level `bisect` would shadow the standard
library module of that name.
"""
