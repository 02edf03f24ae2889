"""Shared state and background work of one window, without widgets: the ``Session``."""
