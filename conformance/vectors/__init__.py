"""Vector files: the format (``format``), loading and validation (``load``), lint (``lint``),
citations (``cite``) and the source article's worked examples (``examples``)."""
