"""Operator actions and reports behind the CLI, the web console and the Django admin."""
