"""Training metrics sent to the stage's MLflow run at every trainer logging step, so a long stage is
watched in the MLflow UI while it runs (not only after it returns).

`follow(trainer, inputs)` adds a :class:`LiveMetrics` callback when the flow opened a run for the
stage (`inputs.tracking`, posttrain.registry.model_registry.Registry.start_training); without one (a stage called
directly, bench/gpu_smoke.sh) it adds nothing and MLflow is not even imported.

Only the main process logs (rank 0 of an accelerate/torchrun job).  The trainer's thread puts each
log line on a queue; a background thread sends what has piled up in one `log_batch` through an
`MlflowClient` bound to that run's tracking URI (never the process-wide fluent API).  It sends only
when the trainer asks, between two steps (at most every `MIN_INTERVAL_S`, and when training ends),
and the step waits for it at most `STEP_WAIT_S`: on 2 cores any work beside a step's compute stalls
torch's threads far beyond its own CPU time (sending from the thread whenever it liked cost
cold-start SFT 12% of its wall time, bench/results/live_metrics.md), while a slow server still
cannot hold a step for more than STEP_WAIT_S.  A failure to log is a warning, never a failed stage:
the flow logs the whole curve after the stage if nothing reached the run (Registry.finish_training).
"""
from __future__ import annotations

import logging
import queue
import threading
import time

from transformers import TrainerCallback

log = logging.getLogger(__name__)

_MAX_METRICS_PER_BATCH = 1000   # MLflow's limit per log_batch
FLUSH_TIMEOUT_S = 120.0
MIN_INTERVAL_S = 5.0
STEP_WAIT_S = 2.0


class LiveMetrics(TrainerCallback):
    """Logs every `on_log` of a trainer to one MLflow run, at the trainer's global step (plus
    `step_offset`, for a second trainer in the same stage)."""

    def __init__(self, uri: str, run_id: str, step_offset: int = 0):
        # posttrain.registry switches MLflow's telemetry off before mlflow is imported.
        from posttrain.registry.model_registry import Metric, MlflowClient, _is_number, metric_name

        self.uri, self.run_id, self.step_offset = uri, run_id, step_offset
        self._client_type, self._metric, self._name, self._is_number = MlflowClient, Metric, metric_name, _is_number
        self._client = None
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._flushing = threading.Event()   # set: send without waiting out the interval
        self._last_send = 0.0
        self._warned = False
        self.logged = 0   # metric values the run has received

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        self.put(state.global_step + self.step_offset, logs)
        if time.monotonic() - self._last_send >= MIN_INTERVAL_S:
            self.flush(STEP_WAIT_S, quiet=True)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.flush()

    def put(self, step: int, values: dict) -> None:
        """Queue one log line (non-numeric values are skipped, NaN/inf kept: MLflow stores them)."""
        now = int(time.time() * 1000)
        metrics = [self._metric(self._name(k), float(v), now, int(step)) for k, v in values.items()
                   if self._is_number(v)]
        if not metrics:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._send_loop, name="posttrain-live-metrics", daemon=True)
            self._thread.start()
        self._queue.put(metrics)

    def flush(self, timeout: float = FLUSH_TIMEOUT_S, quiet: bool = False) -> bool:
        """Send what is queued and wait until it was sent (or failed); False if `timeout` ran out
        (the send goes on in the background)."""
        deadline = time.monotonic() + timeout
        self._flushing.set()
        try:
            while self._queue.unfinished_tasks:
                if time.monotonic() > deadline:
                    if quiet:
                        return False
                    log.warning(f"live metrics: {self._queue.unfinished_tasks} log lines not sent to MLflow run "
                                f"{self.run_id} after {timeout:.0f} s")
                    return False
                time.sleep(0.01)
            return True
        finally:
            self._flushing.clear()

    def _send_loop(self) -> None:
        while True:
            batches = [self._queue.get()]
            self._flushing.wait()   # a flush: between two trainer steps, or at the end
            while True:  # everything that piled up meanwhile goes in one call
                try:
                    batches.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._send([m for batch in batches for m in batch])
            except Exception as exc:  # the training must not die for its curves
                if not self._warned:
                    log.warning(f"live metrics: logging to MLflow run {self.run_id} at {self.uri} failed: {exc}")
                    self._warned = True
            finally:
                self._last_send = time.monotonic()
                for _ in batches:
                    self._queue.task_done()

    def _send(self, metrics: list) -> None:
        if self._client is None:
            self._client = self._client_type(tracking_uri=self.uri)
        for i in range(0, len(metrics), _MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[i:i + _MAX_METRICS_PER_BATCH])
            self.logged += len(metrics[i:i + _MAX_METRICS_PER_BATCH])


def follow(trainer, inputs, step_offset: int = 0) -> LiveMetrics | None:
    """Send the trainer's log lines to the stage's MLflow run live, if the flow opened one."""
    if inputs.tracking is None or not trainer.is_world_process_zero():
        return None
    callback = LiveMetrics(inputs.tracking.uri, inputs.tracking.run_id, step_offset)
    trainer.add_callback(callback)
    return callback

