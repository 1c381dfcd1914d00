"""Small helpers for the Makefile and CI (not imported by the app)."""
