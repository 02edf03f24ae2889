"""Reusable widgets shared by the panels (heatmaps and the like)."""
