"""`python -m frameshard`: the command line (calibrate, train, ab) and its A/B report; the
benchmarks use it too. Not part of the library's API."""
