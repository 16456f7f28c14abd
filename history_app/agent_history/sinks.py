"""Shipping finished runs to the dashboard without ever blocking or crashing the agent.

``HttpSink.send`` only puts the run on a queue. A background thread batches runs into
NDJSON ``POST``s to the ingestion endpoint, split to fit the server's limits (items per
request, bytes per request), retries with backoff (honouring ``Retry-After``), and while
the server is unreachable writes each batch to a spool folder; spooled batches are sent,
oldest first, once the server answers again (also by a later process using the same
folder). A batch the server keeps answering with 5xx is moved to the spool's
``quarantine`` folder after ``max_attempts`` tries, so it cannot block the batches behind
it. ``flush(timeout)`` waits and says what happened (a ``FlushResult``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import Run

logger = logging.getLogger("agent_history.sinks")

_RETRY_LATER = {408, 429}
# A server's Retry-After is honoured, up to this many seconds.
_MAX_RETRY_AFTER = 600.0


@dataclass(frozen=True)
class FlushResult:
    """What happened to the runs since the previous ``flush``.

    ``delivered``: stored by the server (created, updated or duplicate); ``spooled``: still
    waiting (queue or spool folder) when ``flush`` returned; ``rejected``: refused for good
    (kept in ``spool_dir/rejected/``); ``quarantined``: answered 5xx ``max_attempts`` times
    (kept in ``spool_dir/quarantine/``). True only when nothing is waiting, rejected or
    quarantined.
    """

    delivered: int = 0
    spooled: int = 0
    rejected: int = 0
    quarantined: int = 0

    def __bool__(self) -> bool:
        return not (self.spooled or self.rejected or self.quarantined)


def default_spool_dir(url: str) -> Path:
    """The user's own cache folder, one sub-folder per endpoint URL."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "agent-history" / "spool" / hashlib.sha256(url.encode()).hexdigest()[:16]


def _private_dir(path: Path, *, below: Path) -> None:
    """Create ``path`` (and its parents up from ``below``) readable by this user only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    while path != below and below in path.parents:
        path.chmod(0o700)
        path = path.parent


def _line(item: dict[str, Any]) -> bytes:
    try:
        return json.dumps(item, ensure_ascii=False, default=str).encode()
    except UnicodeEncodeError:  # a lone surrogate: let the server decide on the escaped form
        return json.dumps(item, default=str).encode()


@dataclass
class _Answer:
    status: int | None  # None: the server could not be reached
    body: Any = None
    retry_after: float | None = None


class HttpSink:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        batch_size: int = 50,
        flush_interval: float = 1.0,
        spool_dir: str | os.PathLike[str] | None = None,
        timeout: float = 10.0,
        max_backoff: float = 30.0,
        queue_size: int = 10_000,
        max_items_per_request: int = 1000,
        max_request_bytes: int = 9 * 1024 * 1024,
        max_attempts: int = 10,
    ):
        self.url = url
        self.token = token
        self.batch_size = max(1, batch_size)
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.max_backoff = max_backoff
        self.max_items_per_request = max(1, max_items_per_request)
        self.max_request_bytes = max(1, max_request_bytes)
        self.max_attempts = max(1, max_attempts)
        if spool_dir:
            self.spool_dir = Path(spool_dir)
            self.spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        else:
            self.spool_dir = default_spool_dir(url)
            _private_dir(self.spool_dir, below=self.spool_dir.parents[2])
        self.delivered = 0
        self.rejected = 0
        self.quarantined = 0
        self._reported = FlushResult()
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=queue_size)
        self._pending = 0
        self._idle = threading.Condition()
        self._stop = threading.Event()
        self._backoff = 0.0
        self._thread = threading.Thread(target=self._loop, name="agent-history-sink", daemon=True)
        self._thread.start()

    # -- the agent's side: never blocks, never raises ----------------------------------

    def send(self, run: Run | dict[str, Any]) -> None:
        try:
            record = run.to_dict() if isinstance(run, Run) else dict(run)
            with self._idle:
                self._pending += 1
            try:
                self._queue.put_nowait(record)
            except queue.Full:
                self._spool([record])
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
        except Exception:  # noqa: BLE001 — a recording problem must never break the agent
            logger.exception("agent history: could not queue a run")

    def flush(self, timeout: float | None = None) -> FlushResult:
        """Wait until queued and spooled runs were delivered, rejected or quarantined, or
        ``timeout`` ran out; return what happened since the previous ``flush``."""
        return self._wait_and_count(timeout, report=True)

    def wait(self, timeout: float | None = None) -> FlushResult:
        """``flush`` for someone else than the sink's owner (the middleware's own
        ``flush``): the same wait and counts, but the owner's next ``flush`` still reports
        them (they are not taken)."""
        return self._wait_and_count(timeout, report=False)

    def _wait_and_count(self, timeout: float | None, *, report: bool) -> FlushResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            self._idle.notify_all()
            while self._pending > 0 or self._spooled():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._idle.wait(0.05 if remaining is None else min(0.05, remaining))
            waiting = self._pending + sum(self._count(path) for path in self._spooled())
            before = self._reported
            if report:
                self._reported = FlushResult(self.delivered, 0, self.rejected, self.quarantined)
        return FlushResult(
            delivered=self.delivered - before.delivered,
            spooled=waiting,
            rejected=self.rejected - before.rejected,
            quarantined=self.quarantined - before.quarantined,
        )

    def close(self, timeout: float = 5.0) -> FlushResult:
        result = self.flush(timeout)
        self._stop.set()
        self._thread.join(timeout=1)
        return result

    # -- the background thread ----------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self._take_batch()
            try:
                kept = None
                if batch:
                    kept = self._keep(*self._deliver(batch), attempts=0)
                    self._done(batch)
                    batch = []
                # After a failure the spool waits for the backoff like the batch did.
                if kept is None and self._spooled() and not self._stop.is_set():
                    self._drain_spool()
            except Exception:  # noqa: BLE001 — keep the thread alive whatever happens
                logger.exception("agent history: sink loop error")
                try:
                    self._spool(batch)
                finally:
                    self._done(batch)
            if self._backoff:
                self._stop.wait(self._backoff)

    def _done(self, batch: list[dict[str, Any]]) -> None:
        with self._idle:
            self._pending -= len(batch)
            self._idle.notify_all()

    def _take_batch(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        try:
            batch.append(self._queue.get(timeout=self.flush_interval))
        except queue.Empty:
            return batch
        while len(batch) < self.batch_size:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _chunks(self, batch: list[dict[str, Any]]) -> list[list[tuple[dict[str, Any], bytes]]]:
        """The batch in requests of at most ``max_items_per_request`` runs and
        ``max_request_bytes`` bytes; a run too large on its own is rejected here."""
        chunks: list[list[tuple[dict[str, Any], bytes]]] = []
        size = 0
        for item in batch:
            line = _line(item)
            if len(line) > self.max_request_bytes:
                self._reject([item], f"a run of {len(line)} bytes is over max_request_bytes")
                continue
            if (
                not chunks
                or len(chunks[-1]) >= self.max_items_per_request
                or size + len(line) > self.max_request_bytes
            ):
                chunks.append([])
                size = 0
            chunks[-1].append((item, line))
            size += len(line) + 1
        return chunks

    def _deliver(self, batch: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
        """Send the batch; return the runs to send again and whether the server failed (5xx)."""
        chunks = self._chunks(batch)
        again: list[dict[str, Any]] = []
        server_failed = False
        while chunks:
            chunk = chunks.pop(0)
            items = [item for item, _ in chunk]
            answer = self._request(b"\n".join(line for _, line in chunk))
            if answer.status is None:
                return again + items + [item for rest in chunks for item, _ in rest], server_failed
            if answer.status == 413 and len(chunk) > 1:
                limit = answer.body.get("limit") if isinstance(answer.body, dict) else None
                if isinstance(limit, int) and limit > 0:
                    self.max_items_per_request = min(self.max_items_per_request, limit)
                chunks[:0] = [chunk[: len(chunk) // 2], chunk[len(chunk) // 2 :]]
                continue
            if 400 <= answer.status < 500 and answer.status not in _RETRY_LATER:
                self._reject(items, f"the server refused a batch with {answer.status}")
                continue
            again += self._settle(items, answer)
            server_failed = server_failed or answer.status >= 500
        return again, server_failed

    def _settle(self, items: list[dict[str, Any]], answer: _Answer) -> list[dict[str, Any]]:
        """Count the runs the server stored or refused; return those to send again.

        A 5xx (or 408/429) answer counts nothing: the whole request is sent again, which
        the server makes safe (idempotent on run_id). In a 2xx answer, items marked
        "retry" (a transient database failure) are sent again, never counted rejected.
        """
        if answer.status >= 300:
            return self._wait(items, answer)
        results = answer.body.get("results") if isinstance(answer.body, dict) else None
        by_index = {}
        if isinstance(results, list) and len(results) == len(items):
            by_index = {r.get("index", i) if isinstance(r, dict) else i: r for i, r in enumerate(results)}
        again, refused = [], []
        for index, item in enumerate(items):
            result = by_index.get(index)
            status = result.get("status") if isinstance(result, dict) else None
            if status == "rejected":
                logger.error("agent history: run rejected: %s", result.get("errors"))
                refused.append(item)
            elif status == "retry":
                again.append(item)
            else:
                self.delivered += 1
        if refused:
            self._reject(refused, "")
        return self._wait(again, answer)

    def _wait(self, again: list[dict[str, Any]], answer: _Answer) -> list[dict[str, Any]]:
        """Set the pause before ``again`` is sent: the server's Retry-After, else exponential."""
        if not again:
            self._backoff = 0.0
        elif answer.retry_after:
            self._backoff = min(_MAX_RETRY_AFTER, answer.retry_after)
        else:
            self._backoff = self._longer()
        return again

    def _longer(self) -> float:
        return min(self.max_backoff, max(0.5, self._backoff * 2))

    def _request(self, body: bytes) -> _Answer:
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-ndjson"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, headers, raw = response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            status, headers, raw = exc.code, exc.headers, exc.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            logger.warning("agent history: %s unreachable (%s); spooling", self.url, exc)
            self._backoff = self._longer()
            return _Answer(None)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        try:
            retry_after = float(headers.get("Retry-After", ""))
        except (TypeError, ValueError):
            retry_after = None
        return _Answer(status, body, retry_after)

    # -- the spool ----------------------------------------------------------------------

    def _reject(self, items: list[dict[str, Any]], reason: str) -> None:
        if reason:
            logger.error("agent history: %s; kept in %s", reason, self.spool_dir / "rejected")
        self.rejected += len(items)
        self._spool(items, folder="rejected")

    def _keep(
        self, items: list[dict[str, Any]], server_failed: bool, *, attempts: int, name: str = ""
    ) -> Path | None:
        """Spool runs still to be sent, counting the tries the server answered 5xx; past
        ``max_attempts`` they go to the quarantine folder so later batches can pass."""
        if not items:
            return None
        attempts += server_failed
        if attempts >= self.max_attempts:
            self.quarantined += len(items)
            logger.error(
                "agent history: %d runs answered 5xx %d times; moved to %s",
                len(items),
                attempts,
                self.spool_dir / "quarantine",
            )
            return self._spool(items, folder="quarantine", name=name)
        return self._spool(items, attempts=attempts, name=name)

    def _spool(
        self, batch: list[dict[str, Any]], folder: str = "", *, attempts: int = 0, name: str = ""
    ) -> Path | None:
        if not batch:
            return None
        target = self.spool_dir / folder if folder else self.spool_dir
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The name starts with the time the batch was first spooled (so the spool is sent
        # oldest first, also after a retry) and carries the number of 5xx answers so far.
        name = name or f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        temporary = target / f".{name}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(b"\n".join(_line(item) for item in batch))
        path = target / f"{name}.{attempts}.ndjson"
        temporary.replace(path)  # atomic: a reader never sees half a file
        return path

    def _spooled(self) -> list[Path]:
        return sorted(self.spool_dir.glob("*.ndjson"))

    @staticmethod
    def _read(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    @staticmethod
    def _count(path: Path) -> int:
        try:
            return sum(1 for line in path.read_bytes().splitlines() if line.strip())
        except OSError:  # sent and removed meanwhile
            return 0

    def _drain_spool(self) -> None:
        for path in self._spooled():
            if self._stop.is_set():
                return
            try:
                batch = self._read(path)
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                path.rename(path.with_suffix(".unreadable"))
                continue
            stem, _, attempts = path.name.removesuffix(".ndjson").partition(".")
            kept = self._keep(*self._deliver(batch), attempts=int(attempts or 0), name=stem)
            if kept != path:  # the rest is written first, so a flush never sees an empty spool early
                path.unlink(missing_ok=True)
            with self._idle:
                self._idle.notify_all()
            if kept is not None and kept.parent == self.spool_dir:
                return  # still failing: wait for the backoff before the batches behind it
