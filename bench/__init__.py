"""Epochal benchmark suite: ``python -m bench <scenario>`` (see ``bench/__main__.py``)."""
