"""Shipping finished runs to the dashboard without ever blocking or crashing the agent.

``HttpSink.send`` only puts the run on a queue. A background thread batches runs into
NDJSON ``POST``s to the ingestion endpoint, retries with exponential backoff, and while
the server is unreachable writes each batch to a spool folder; spooled batches are sent,
oldest first, once the server answers again (also by a later process using the same
folder). ``flush(timeout)`` waits until everything given so far was delivered.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .records import Run

logger = logging.getLogger("agent_history.sinks")

# Answers that will not improve by retrying: keep the batch in the spool's "rejected"
# folder for a person to look at, and move on.
_PERMANENT = {400, 401, 403, 404, 413, 415}


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
    ):
        self.url = url
        self.token = token
        self.batch_size = max(1, batch_size)
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.max_backoff = max_backoff
        self.spool_dir = Path(spool_dir) if spool_dir else Path(tempfile.gettempdir()) / "agent-history-spool"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.delivered = 0
        self.rejected = 0
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

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until queued and spooled runs were delivered; False if ``timeout`` ran out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            self._idle.notify_all()
            while self._pending > 0 or self._spooled():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(0.05 if remaining is None else min(0.05, remaining))
        return True

    def close(self, timeout: float = 5.0) -> bool:
        delivered = self.flush(timeout)
        self._stop.set()
        self._thread.join(timeout=1)
        return delivered

    # -- the background thread ----------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self._take_batch()
            try:
                if batch:
                    if not self._post(batch):
                        self._spool(batch)
                    with self._idle:
                        self._pending -= len(batch)
                        self._idle.notify_all()
                if self._spooled() and not self._stop.is_set():
                    self._drain_spool()
            except Exception:  # noqa: BLE001 — keep the thread alive whatever happens
                logger.exception("agent history: sink loop error")
            if self._backoff:
                self._stop.wait(self._backoff)

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

    def _post(self, batch: Iterable[dict[str, Any]]) -> bool:
        """True when the server took the batch (or refused it for good); False to retry."""
        body = "\n".join(json.dumps(item, ensure_ascii=False, default=str) for item in batch).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-ndjson"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status = response.status
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, {}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            logger.warning("agent history: %s unreachable (%s); spooling", self.url, exc)
            self._backoff = min(self.max_backoff, max(0.5, self._backoff * 2))
            return False
        if status >= 500 or status == 429:
            self._backoff = min(self.max_backoff, max(0.5, self._backoff * 2))
            return False
        self._backoff = 0.0
        results = answer.get("results", []) if isinstance(answer, dict) else []
        rejected = [r for r in results if r.get("status") == "rejected"]
        if status in _PERMANENT:
            logger.error("agent history: the server refused a batch with %s", status)
            self._spool(list(batch), folder="rejected")
            self.rejected += len(list(batch)) if status != 207 else 0
            return True
        for result in rejected:
            logger.error("agent history: run rejected: %s", result.get("errors"))
        self.rejected += len(rejected)
        self.delivered += len(results) - len(rejected)
        return True

    # -- the spool ----------------------------------------------------------------------

    def _spool(self, batch: list[dict[str, Any]], folder: str = "") -> None:
        target = self.spool_dir / folder if folder else self.spool_dir
        target.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.ndjson"
        temporary = target / f".{name}.tmp"
        temporary.write_text("\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in batch))
        temporary.replace(target / name)  # atomic: a reader never sees half a file

    def _spooled(self) -> list[Path]:
        return sorted(self.spool_dir.glob("*.ndjson"))

    def _drain_spool(self) -> None:
        for path in self._spooled():
            if self._stop.is_set():
                return
            try:
                batch = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            except (OSError, ValueError):
                path.rename(path.with_suffix(".unreadable"))
                continue
            if self._post(batch):
                path.unlink(missing_ok=True)
                with self._idle:
                    self._idle.notify_all()
            else:
                return
