"""Test helpers shared across test packages (fake provider server, fixtures)."""
