"""The peak memory of a process while a test's block runs (sampled in a thread of the test's own)."""

from __future__ import annotations

import threading

import psutil


class PeakRss:
    """``with PeakRss(process) as rss:`` samples ``process``'s resident set every ``interval`` seconds until the
    block ends; :attr:`peak` is the largest sample, in bytes."""

    def __init__(self, process: psutil.Process, interval: float = 0.2) -> None:
        self.process = process
        self.interval = interval
        self.samples = [process.memory_info().rss]
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    @property
    def peak(self) -> int:
        return max(self.samples)

    def _watch(self) -> None:
        while not self._done.wait(self.interval):
            self.samples.append(self.process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._watcher.join()
