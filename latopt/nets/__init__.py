"""Networks as latopt sees them: models by name, their blocks and stem/head, the modules latopt puts in, the
fold variants, and the per-block table of ``latopt inspect``."""
