"""Bug-report bundles: standalone repro, issue text, environment, plots."""
