"""Reading one Prometheus: a cycle's fixed queries, concurrently, with a deadline and one retry.

Every failure mode (refused, slow, HTTP error, a body that is not a Prometheus answer) becomes a
`TelemetryError` with a message for the TelemetryUnavailable condition; nothing here raises anything else.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from heterojob.telemetry.family import Vector
from heterojob.failures import describe


class TelemetryError(Exception):
    """Prometheus could not answer this cycle; its message says why, for people."""


def connect(url: str, timeout_s: float, *, headers: Mapping[str, str] | None = None,
            verify_tls: bool = True) -> PrometheusConnect:
    """A Prometheus client with the operator's deadline and retry: one quick retry on a refused connection
    or a 5xx, the next cycle being the real retry; a read timeout is not retried (a slow Prometheus is not
    faster the second time; the client's default would wait four timeouts)."""
    retry = Retry(total=1, read=False, backoff_factor=0.1, status_forcelist=(408, 429, 502, 503, 504),
                  allowed_methods=("GET",), raise_on_status=False)
    return PrometheusConnect(url, headers=dict(headers) if headers else None, disable_ssl=not verify_tls,
                             retry=retry, timeout=timeout_s)


class PrometheusReader:
    def __init__(self, url: str, *, timeout_s: float = 5.0, headers: Mapping[str, str] | None = None,
                 verify_tls: bool = True, workers: int = 8) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = dict(headers or {})
        self._verify = verify_tls
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heterojob-prom")
        self.bytes_read = 0  # answer bytes (decoded JSON) since the caller last set it to 0
        self._lock = threading.Lock()

    def _count(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self.bytes_read += len(response.content)

    def _connection(self) -> PrometheusConnect:
        """One client per thread: a requests Session is not meant to be shared across threads."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.url, self.timeout_s, headers=self._headers, verify_tls=self._verify)
            conn._session.hooks["response"].append(self._count)  # noqa: SLF001 - the client's own Session
        return conn

    def _one(self, name: str, query: str, at: float | None) -> Vector:
        params = {"time": f"{at:.3f}"} if at is not None else {}
        params["timeout"] = f"{max(1.0, self.timeout_s):.0f}s"  # Prometheus gives up too, not only us
        try:
            result: Any = self._connection().custom_query(query, params=params)
        except PrometheusApiClientException as exc:
            raise TelemetryError(f"query {name} failed: {_short(str(exc))}") from None
        except requests.JSONDecodeError:
            raise TelemetryError(f"query {name}: the answer is not a Prometheus API response (not JSON)") from None
        except requests.Timeout:
            raise TelemetryError(f"query {name} timed out after {self.timeout_s:g}s") from None
        except requests.RequestException as exc:
            # in words (refused, TLS, timed out), not urllib3's pool-and-retry text
            raise TelemetryError(f"cannot reach Prometheus at {self.url}: {describe(exc, self.timeout_s)}") from None
        except (ValueError, KeyError, TypeError):
            raise TelemetryError(f"query {name}: the answer is not a Prometheus API response") from None
        if not isinstance(result, list) or not all(isinstance(s, dict) for s in result):
            raise TelemetryError(f"query {name}: expected an instant vector, got {type(result).__name__}")
        return result

    def query(self, queries: Mapping[str, str], at: float | None = None) -> dict[str, Vector]:
        """Every query evaluated at the same instant `at` (unix seconds); all or nothing."""
        futures = {name: self._pool.submit(self._one, name, q, at) for name, q in queries.items()}
        out: dict[str, Vector] = {}
        errors: list[str] = []
        for name, future in futures.items():
            try:
                out[name] = future.result()
            except TelemetryError as exc:
                errors.append(str(exc))
        if errors:
            unique = list(dict.fromkeys(errors))
            raise TelemetryError("; ".join(unique[:3]) + (f" (+{len(unique) - 3} more)" if len(unique) > 3 else ""))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
