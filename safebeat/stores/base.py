"""The name this module had in safebeat 0.1.0: everything here is `safebeat.stores.protocols`'s.
Kept so that code written against 0.1.0 keeps importing it; new code imports
`safebeat.stores.protocols`."""

from safebeat.stores.protocols import *  # noqa: F403
