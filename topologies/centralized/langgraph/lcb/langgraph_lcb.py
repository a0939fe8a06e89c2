"""Seed entry point of the centralized team: `python -m` this module (see `lcb run --help`)."""

from lcb.cli.run_cmd import topology_main

if __name__ == "__main__":
    topology_main("centralized")
