"""The deterministic simulation of beats, broker, workers and faults (see `world.py`)."""
