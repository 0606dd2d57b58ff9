"""Example training scripts and specs shipped with Aviflow (used by `make demo` and tests)."""
