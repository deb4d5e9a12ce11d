"""The chaos suite: real beat replicas under faults, every window counted (docs/reliability.md)."""
