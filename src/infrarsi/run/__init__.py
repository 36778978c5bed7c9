"""Run: the search over launch knobs and code patches, and the models it learns as it goes."""
