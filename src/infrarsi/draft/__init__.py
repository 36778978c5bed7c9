"""Drafting a workload manifest from the command a user runs today (issue 39): what the
command and the script say, read without running training. Not wired into the CLI yet: the
dry run that reads the metrics is not built."""
