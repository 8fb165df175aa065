#!/usr/bin/env python3
"""Prints how many leading bytes two files share and how many positions
agree: `byte_agreement.py GOT EXPECTED` -> "agreement 62/64 (prefix 60)"."""
import sys

got, expected = (open(p, "rb").read() for p in sys.argv[1:3])
same = sum(a == b for a, b in zip(got, expected))
prefix = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
              min(len(got), len(expected)))
print(f"agreement {same}/{len(expected)} (prefix {prefix})")
