"""Trials, verdicts and the searches over them (feature sets and commits)."""
