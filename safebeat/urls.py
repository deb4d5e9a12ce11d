"""The name this module had before it became `safebeat.store_urls`: everything here is
`safebeat.store_urls`'s. Kept so that a store plugin written from docs/extending.md of
that time (`safebeat.urls.redact(url)`) keeps importing; new code imports `safebeat.store_urls`."""

from safebeat.store_urls import *  # noqa: F403
