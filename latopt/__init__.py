"""latopt: a hardware-aware latency optimizer for mobile CNNs (Layer Folding + device LUTs)."""

__version__ = "0.1.0"
