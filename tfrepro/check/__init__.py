"""`tfrepro check`: the probed trial (`run`), the judging (`judge`, pure) and
the checklist values and their text (`checklist`)."""
