"""tfrepro: minimal TensorFlow repros, feature bisection and bug reports."""

__version__ = "0.1.0"
