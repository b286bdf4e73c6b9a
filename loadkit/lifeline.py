"""Every process loadkit starts dies with its parent, SIGKILL included; stop signals.

A load generator that outlives its controller keeps loading someone's server,
so every child is started by `popen()`/`run()` here:

- **PR_SET_PDEATHSIG** (Linux `prctl`, set in the child between fork and
  exec, so it holds for any binary): the kernel sends the child a signal when
  its parent dies, SIGKILL of the parent included. The kernel ties it to the
  *thread* that forked the child, not the process: a child forked from a
  short-lived thread would be killed when that thread ends. So children are
  forked from the main thread, or else from one spawner thread that lives as
  long as the process.
- **The race before prctl**: a parent that dies between fork and prctl has
  already handed the child to init, and no signal would come. The child
  compares its parent PID with the one it was forked from right after prctl
  and exits if they differ. (Python children of ours also poll their parent
  PID while they run: the samplers' `StopFlag`.)
- **Grandchildren**: tritonserver forks its Python backend stubs; they are
  not our children, so `GroupGuard` starts a small watcher process that
  holds a pipe from us and SIGKILLs the server's whole process group when
  the pipe closes without a word from us (we died).

`stop_signals()` makes SIGINT and SIGTERM raise KeyboardInterrupt in a
long-running command. It is explicit because a process started in the
background by a non-interactive shell inherits SIGINT as *ignored*.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

_PR_SET_PDEATHSIG = 1

try:  # loaded before any fork: the child only calls it
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the liveness checks still work
    _prctl = None


def _die_with_parent(parent_pid: int, death_signal: int) -> Callable[[], None]:
    """The child's first act after fork (preexec_fn): ask for the signal, check the parent."""

    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)  # the parent is already gone

    return preexec


# --------------------------------------------------------------- the spawner thread
_requests: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
    queue.SimpleQueue()
)
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawner_loop() -> None:
    while True:
        call, future = _requests.get()
        try:
            future.set_result(call())
        except BaseException as exc:  # handed back to the caller's thread
            future.set_exception(exc)


def _on_long_lived_thread(call: Callable[[], Any]) -> Any:
    """Run `call` (a fork) on the main thread or on the process-long spawner thread."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return call()
    with _spawner_lock:
        if _spawner is None:
            _spawner = threading.Thread(target=_spawner_loop, name="loadkit-spawner", daemon=True)
            _spawner.start()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    _requests.put((call, future))
    return future.result()


# --------------------------------------------------------------- starting children
def _prepared(kwargs: dict[str, Any], death_signal: int) -> dict[str, Any]:
    if kwargs.get("preexec_fn") is not None:
        raise ValueError("lifeline sets preexec_fn itself")
    return {**kwargs, "preexec_fn": _die_with_parent(os.getpid(), death_signal)}


def popen(
    argv: Sequence[str], *, death_signal: int = signal.SIGKILL, **kwargs: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen` for a child that gets `death_signal` when we die.

    SIGKILL (the default) for children that must stop at once (load
    generators, servers); SIGTERM for those that flush their files first.
    """
    prepared = _prepared(kwargs, death_signal)
    proc: subprocess.Popen[Any] = _on_long_lived_thread(lambda: subprocess.Popen(argv, **prepared))
    return proc


def stop(proc: subprocess.Popen[Any], grace_s: float = 3.0) -> None:
    """SIGTERM a child we started, SIGKILL it after `grace_s`; reaped either way."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(grace_s)


def run(
    argv: Sequence[str], *, death_signal: int = signal.SIGKILL, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` for a short-lived child, with the same guarantee as `popen`."""
    timeout = kwargs.pop("timeout", None)
    check = kwargs.pop("check", False)
    input_ = kwargs.pop("input", None)
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with popen(argv, death_signal=death_signal, **kwargs) as proc:
        try:
            out, err = proc.communicate(input_, timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


# --------------------------------------------------------------- process groups
_WATCHER_CODE = """\
import os, signal, sys
pgid = int(sys.argv[1])
try:
    word = os.read(0, 1)
except OSError:
    word = b""
if word != b"x":
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


class GroupGuard:
    """Kills process group `pgid` if we die: a watcher holds a pipe whose far end is ours.

    On a normal stop, `release()` tells the watcher to exit without acting.
    The watcher runs in a session of its own (so it is not in the group it
    kills) and is itself no load on anyone: it blocks in read().
    """

    def __init__(self, pgid: int) -> None:
        read_end, self._write_end = os.pipe()
        os.set_inheritable(self._write_end, False)
        try:
            self._watcher = _on_long_lived_thread(
                lambda: subprocess.Popen(
                    [sys.executable, "-S", "-c", _WATCHER_CODE, str(pgid)],
                    stdin=read_end,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    close_fds=True,
                )
            )
        finally:
            os.close(read_end)

    @property
    def pid(self) -> int:
        return int(self._watcher.pid)

    def release(self) -> None:
        """We stop the group ourselves: the watcher exits without killing anything."""
        if self._write_end < 0:
            return
        try:
            os.write(self._write_end, b"x")
        except OSError:
            pass
        os.close(self._write_end)
        self._write_end = -1
        try:
            self._watcher.wait(5.0)
        except subprocess.TimeoutExpired:
            self._watcher.kill()
            self._watcher.wait()


# --------------------------------------------------------------- stop signals
def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt inside; the old handlers come back after.

    Installed on the main thread only (Python delivers signals there).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def ignore_stop_signals() -> None:
    """While stopping: a second Ctrl-C must not interrupt the stop and orphan a child."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
