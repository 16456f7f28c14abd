"""The demo data ``quickstart`` loads: the sample files in this folder and the generated
runs of ``generate.py``."""
