"""Copier wrapper for `tfrepro new` and `tfrepro update`."""
