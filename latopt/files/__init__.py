"""latopt's files: atomic output, checkpoints, validated records, the readers of input files, torch files and
the import of a user's own weights."""
