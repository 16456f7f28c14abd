"""Transaction-level advisory locks on PostgreSQL, in a fixed number of slots per kind.

Two requests that may both create the same new row write one after the other: two
batches creating the same new session, two OTLP requests carrying spans of the same
trace (each must see the other's spans). A lock per key made a request's locks grow with
its keys: one OTLP request of 8,000 single-span traces took 16,000, PostgreSQL's shared
lock table (``max_locks_per_transaction`` × ``max_connections`` entries for every
transaction together) ran out ("out of shared memory"), and the request failed every time
it was sent again. So each key is hashed into one of ``SLOTS`` slots of its kind, and a
transaction locks the slots its keys fall in: at most ``SLOTS`` locks of each kind,
whatever a request holds.

Every transaction takes its slots in one order (the kinds in the order of their numbers,
the slots of a kind in ascending order, all of a kind at once, before any row lock), so
no two transactions wait for each other's slots in a cycle. Two keys sharing a slot only
make their writers wait for each other, never fail. SQLite writes one transaction at a
time already (``IMMEDIATE`` takes its lock at ``BEGIN``): nothing is taken there.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from django.db import connection

# Enough that two small requests rarely share a slot (1 in 16 for one key each), few
# enough that two kinds stay well inside the 64 locks per transaction PostgreSQL sizes
# its lock table for, beside the locks on the tables and indexes a write takes.
SLOTS = 16

# The first key of ``pg_advisory_xact_lock(int, int)``, one per kind, in the order a
# transaction takes them ("ah" and a number: apart from any other application's).
TRACES = 0x6168_0001
SESSIONS = 0x6168_0002


def slot_of(kind: int, project_id: int, key: str) -> int:
    """The slot of ``key``: the same in every process (Python's ``hash`` of a string is not)."""
    return zlib.crc32(f"{kind}:{project_id}:{key}".encode()) % SLOTS


def lock_slots(kind: int, keys: Iterable[str], project_id: int) -> list[int]:
    """Lock, until the end of the open transaction, the slots of ``keys`` (PostgreSQL; on
    other databases nothing). Returns the slots locked, in the order taken.

    A transaction calls this at most once per kind, before it locks any row, or again
    only for keys whose slots it already holds (a lock held is taken again at once): a
    second call taking a lower slot after a higher one could wait in a cycle."""
    if connection.vendor != "postgresql":
        return []
    slots = sorted({slot_of(kind, project_id, key) for key in keys})
    with connection.cursor() as cursor:
        for slot in slots:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [kind, slot])
    return slots
