"""Helpers more than one tier of the suite uses (plain functions and context managers; the
fixtures built on them live in the conftest.py files). A test module imports helpers from
here, from its tier's `_support` package or from a conftest, never from another test module."""
