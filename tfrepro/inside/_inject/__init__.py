# Not imported: this directory goes first on the PYTHONPATH of trial processes
# (see sitecustomize.py); the file only makes setuptools ship the directory.
