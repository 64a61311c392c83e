"""Events to Elasticsearch without ever slowing a stage, and without losing one when Elasticsearch is away.

`emit` only appends to an in-memory buffer. A background thread bulk-indexes the buffer every interval or batch.
When Elasticsearch cannot be reached (at start or mid-run) batches go to an append-only spool file next to the
process; once a probe finds Elasticsearch back, the spool is replayed and truncated. "Back" includes the event index
template: a stage that may not install it (a secured Elasticsearch's writer) spools until its admin has. Documents
carry ids derived from their content, so a replay that is interrupted and run again never duplicates an event. If
the buffer fills faster than it drains, `emit` writes the overflow to the spool itself: slower, but nothing is
dropped.

A process can end while Elasticsearch is still away; its spool stays behind. Each sink holds a lock on its own
spool for its lifetime, and any live sink that finds an unlocked spool beside its own (its process is gone)
replays and removes it, so events outlive the process that logged them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from aitax.telemetry.elastic_access import ElasticsearchCredentials, client, http_options, redacted, refusal, usable_url
from aitax.telemetry.events import INDEX_PREFIX, TEMPLATE_NAME, Event

log = logging.getLogger(__name__)
PROBE_INTERVAL_S = 2.0
RETRIED_STATUSES = (401, 403, 429)  # a refused credential, a full write queue: the same event may pass later
ADOPT_INTERVAL_S = 5.0


def document_id(document: dict[str, Any]) -> str:
    """The same event always gets the same id: replays overwrite instead of duplicating."""
    identity = [document.get(k) for k in ("run_id", "stage", "stream_id", "frame_index", "face_index",
                                          "wall_start_ns", "process", "host")]
    return hashlib.blake2b(json.dumps(identity).encode(), digest_size=12).hexdigest()


def index_for(document: dict[str, Any]) -> str:
    """Daily indices, matched by the `aitax-events-*` template."""
    return f"{INDEX_PREFIX}-{time.strftime('%Y.%m.%d', time.gmtime(document['wall_start_ns'] / 1e9))}"


def install_event_template(url: str, credentials: ElasticsearchCredentials | None = None) -> bool:
    """The `aitax-events-*` template (and new fields on existing indices). Idempotent. Both the local stack's `up`
    (as its admin) and every sink's first shipment run it: an Elasticsearch in a cluster gets it before its first
    event. False when this identity may not (a stage's writer on a secured Elasticsearch: its admin installs it)."""
    import requests

    from aitax.common.errors import UserError
    from aitax.telemetry.events import INDEX_MAPPING, index_template

    url, access = usable_url(url, credentials), http_options(credentials)
    try:
        response = requests.put(f"{url}/_index_template/{TEMPLATE_NAME}", json=index_template(), timeout=10,
                                **access)
    except requests.RequestException as error:
        raise UserError(f"Elasticsearch at {redacted(url)} unreachable: {type(error).__name__}") from None
    if response.status_code == 403:
        return False
    if not response.ok:
        raise UserError(refusal(url, response.status_code, credentials) or
                        f"installing the event index template failed: {response.status_code} {response.text[:200]}")
    # Indices made before a field was added keep their old strict mapping and would reject new events: extend
    # them (adding fields is always allowed; a changed type would need a new schema version and index).
    response = requests.put(f"{url}/{INDEX_PREFIX}-*/_mapping", json=INDEX_MAPPING,
                            params={"allow_no_indices": "true"}, timeout=30, **access)
    if not response.ok:
        raise UserError(f"updating event index mappings failed: {response.status_code} {response.text[:200]}")
    return True


class ElasticsearchSink:
    enabled = True

    def __init__(self, url: str, spool: Path, batch_size: int = 500, flush_interval_s: float = 1.0,
                 buffer_limit: int = 50_000) -> None:
        self.url = url
        self.shown = redacted(url)  # what log lines say: never the password a URL may carry
        self.spool = spool
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.buffer_limit = buffer_limit
        self.indexed = 0
        self.spooled = 0
        self.replayed = 0
        self.malformed_spool_lines = 0
        self._client = client(url, request_timeout=10, max_retries=0)
        self._buffer: deque[dict[str, Any]] = deque()
        self._spool_lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._available = True
        self._next_probe = 0.0
        spool.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(spool.with_suffix(".lock"), "w")  # noqa: SIM115 - held for the sink's whole life
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._next_adoption = 0.0
        self._template_ready = False
        self._template_wait_logged = False
        self.adopted = 0
        self._thread = threading.Thread(target=self._run, name="es-events", daemon=True)
        self._thread.start()

    # -- the stage side: never blocks on the network ----------------------------------------------------------
    def emit(self, event: Event) -> None:
        if len(self._buffer) >= self.buffer_limit:
            self._append_to_spool([event.to_document()])
            return
        self._buffer.append(event.to_document())
        if len(self._buffer) >= self.batch_size:
            self._wake.set()

    def close(self, timeout_s: float = 30.0) -> None:
        self._closing = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._append_to_spool(self._take(len(self._buffer)))  # anything the thread could not index in time
        self._lock.close()  # from here another process's sink may adopt what is left
        if self.spool.exists() and not self.spool.stat().st_size:
            self.spool.unlink()
            self.spool.with_suffix(".lock").unlink(missing_ok=True)

    # -- the background side ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            if self._buffer:
                self._ship(self._take(len(self._buffer)))
            if self.spool.exists() and self.spool.stat().st_size and self._probe():
                self._replay()
            if time.monotonic() >= self._next_adoption and self._probe():
                self._next_adoption = time.monotonic() + ADOPT_INTERVAL_S
                self._adopt_orphans()
            if self._closing and not self._buffer:
                return

    def _take(self, count: int) -> list[dict[str, Any]]:
        return [self._buffer.popleft() for _ in range(min(count, len(self._buffer)))]

    def answers(self) -> bool:
        """Whether Elasticsearch answers now (a sink assumes it does until a shipment fails)."""
        try:
            self._client.cluster.health(timeout="2s")
        except Exception:  # any failure means: not now
            return False
        return True

    def _probe(self) -> bool:
        """Whether events may be indexed now: Elasticsearch answers and their index template is in place."""
        if self._available and self._template_ready:
            return True
        now = time.monotonic()
        if now < self._next_probe and not self._closing:
            return False
        self._next_probe = now + PROBE_INTERVAL_S
        if not self.answers() or not self._template_in_place():
            self._available = False
            return False
        if not self._available:
            log.warning("Elasticsearch at %s is back: replaying the spool", self.shown)
        self._available = True
        return True

    def _template_in_place(self) -> bool:
        """Install the template, or find the admin's. Never index before it: a daily index made without it is
        mapped by guesses (`partition` a long, not strict), which no later template or mapping update can fix, so
        events wait in the spool meanwhile (a stage on a secured Elasticsearch may start before the admin's Job)."""
        if self._template_ready:
            return True
        from elasticsearch import AuthorizationException, NotFoundError

        try:
            self._template_ready = install_event_template(self.url)
        except Exception as error:  # unreachable, or an unexpected answer: the admin's may be there all the same
            log.warning("event index template not installed at %s: %s", self.shown, error)
        if not self._template_ready:
            try:
                self._client.indices.get_index_template(name=TEMPLATE_NAME)
                self._template_ready = True
            except NotFoundError:
                if not self._template_wait_logged:
                    log.warning("Elasticsearch at %s has no %s template yet (its admin installs it): spooling "
                                "events to %s until it has", self.shown, TEMPLATE_NAME, self.spool)
                    self._template_wait_logged = True
            except AuthorizationException:
                self._template_ready = True  # an identity that may not even look (no `monitor`): index as given
            except Exception:  # not answering now: probed again later
                pass
        return self._template_ready

    def _ship(self, documents: list[dict[str, Any]]) -> None:
        if not self._probe():
            self._append_to_spool(documents)
            return
        for start in range(0, len(documents), self.batch_size):
            batch = documents[start:start + self.batch_size]
            if not self._bulk(batch):
                self._append_to_spool(documents[start:])
                return
            self.indexed += len(batch)

    def _bulk(self, documents: list[dict[str, Any]]) -> bool:
        from elasticsearch import helpers

        actions = ({"_index": index_for(d), "_id": document_id(d), "_source": d} for d in documents)
        try:
            _, errors = helpers.bulk(self._client, actions, raise_on_error=False, stats_only=False)
        except Exception as error:  # connection refused, timeout, node gone, credentials refused: spool, probe later
            if self._available:
                status = getattr(getattr(error, "meta", None), "status", None)
                log.warning("%s: spooling events to %s", refusal(self.url, status) or
                            f"Elasticsearch at {self.shown} unreachable ({type(error).__name__})", self.spool)
            self._available = False
            return False
        refused = [e for e in errors if next(iter(e.values())).get("status") in RETRIED_STATUSES]
        if refused:  # a credential or a full queue may change: the whole batch is spooled, ids dedupe its replay
            if self._available:
                status = next(iter(refused[0].values())).get("status")
                log.warning("%s: spooling events to %s", refusal(self.url, status) or "Elasticsearch busy (429)",
                            self.spool)
            self._available = False
            return False
        if errors:
            # Rejected documents (mapping errors) would fail again on every replay: log them, do not spool.
            log.error("Elasticsearch rejected %d event(s), first: %s", len(errors), str(errors[0])[:300])
        return True

    def _append_to_spool(self, documents: list[dict[str, Any]]) -> None:
        if not documents:
            return
        with self._spool_lock, open(self.spool, "a") as spool:
            spool.writelines(json.dumps(d, separators=(",", ":")) + "\n" for d in documents)
        self.spooled += len(documents)

    def _adopt_orphans(self) -> None:
        """Replay the spools of sinks whose processes ended while Elasticsearch was away."""
        for orphan in self.spool.parent.glob("*.jsonl"):
            if orphan == self.spool:
                continue
            with open(orphan.with_suffix(".lock"), "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its process is alive and will replay it
                documents = self._read_spool(orphan)
                if documents and not self._bulk_all(documents):
                    return
                self.adopted += len(documents)
                orphan.unlink(missing_ok=True)
                orphan.with_suffix(".lock").unlink(missing_ok=True)

    def _read_spool(self, path: Path) -> list[dict[str, Any]]:
        documents = []
        for line in path.read_text().splitlines():
            try:
                documents.append(json.loads(line))
            except ValueError:
                self.malformed_spool_lines += 1
        return documents

    def _bulk_all(self, documents: list[dict[str, Any]]) -> bool:
        for start in range(0, len(documents), self.batch_size):
            if not self._bulk(documents[start:start + self.batch_size]):
                return False  # the part already sent is harmless next time: ids come from content
        return True

    def _replay(self) -> None:
        with self._spool_lock:
            documents = self._read_spool(self.spool)
            if not self._bulk_all(documents):
                return  # keep the spool; a later replay resends it without duplicates
            self.replayed += len(documents)
            self.spool.write_text("")


def replay_spools(url: str, spool_dir: Path) -> int:
    """Replay every spool in `spool_dir` left by processes that have ended (`aitax events replay`)."""
    import os

    sink = ElasticsearchSink(url, spool_dir / f"replay-{os.getpid()}.jsonl")
    try:
        if not sink._probe():
            from aitax.common.errors import UserError

            raise UserError(f"Elasticsearch at {redacted(url)} unreachable or without the {TEMPLATE_NAME} template: "
                            f"the spools in {spool_dir} stay for later")
        sink._adopt_orphans()
    finally:
        sink.close()
    return sink.adopted
