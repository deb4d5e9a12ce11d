"""Subscriptions and their daily charges."""
