"""Calibration: the micro-benchmarks behind the machine profile, one module per profile table.

:mod:`executors.calibration.calibrate` measures them all and assembles the profile (``simasgd
calibrate``); docs/profile.md has the format. Nothing is imported here: a table's module is imported by
name, so measuring one table loads only what it needs.
"""
