"""The searches and the bisections built on them.

- `rangesearch`            pure: ordered ranges (feature sets: `trials/ddmin.py`)
- `engine`, `ends`         feature bisection (`tfrepro bisect PATH`)
- `ranges`                 the range bisection commit and version mode share
- `commits`, `gitcopy`     commit bisection (`--good/--bad`), read-only checkouts
- `versions`               version bisection (`--tf-versions`)

A subpackage on purpose: a top-level `bisect` would shadow the standard
library module of that name.
"""
