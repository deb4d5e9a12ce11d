"""The billing example's Django project; its Celery app is loaded with it, as usual."""

from billing_site.celery import app

__all__ = ["app"]
