"""Fixtures shared by every test package. Package-specific fixtures live beside their tests."""
