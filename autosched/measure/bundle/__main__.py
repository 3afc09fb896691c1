"""`python -m autosched.measure.bundle DIR`: measure a bundle's round on this machine
(see measure_round.py)."""
import sys

from .measure_round import main

sys.exit(main())
