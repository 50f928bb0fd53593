"""The project's tools (benchmarks, checks, generators of documentation), run as scripts (``python tools/NAME.py``);
a package so that tests, and tools among themselves, import them as ``tools.NAME``."""
