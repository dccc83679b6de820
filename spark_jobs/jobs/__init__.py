"""Job entry points (tiny: argument parsing only) and job loading."""
