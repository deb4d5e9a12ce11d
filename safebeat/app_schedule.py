"""The name this module had in safebeat 0.1.0: everything here is `safebeat.entries.app_entries`'s.
Kept so that code written against 0.1.0 keeps importing it; new code imports
`safebeat.entries.app_entries`."""

from safebeat.entries.app_entries import *  # noqa: F403
