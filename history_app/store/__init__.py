"""What reads and writes share: rows <-> records, kept counts, search, provenance, locks."""
