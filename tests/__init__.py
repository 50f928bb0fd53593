"""latopt's tests: a package, so that the fuzz and fault harness imports as ``tests.harness``."""
