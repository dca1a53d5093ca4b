"""Stateful operators of the runtime: join, reduce, iterate."""
