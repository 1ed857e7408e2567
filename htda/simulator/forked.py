"""What ``--jobs`` runs in forked processes (the engine's policies, the suite's traces): each outcome, or the
error that ended it, sent back to the parent through a pipe.

A process forked (not spawned) has its work already: the trace's chunks, the policies, the spec.  Nothing is
pickled but the outcomes.  The parent waits on the pipes' ends (:func:`multiprocessing.connection.wait`), so
the first error, or a process that died (killed, out of memory: its pipe ends without an outcome), is seen at
once, and the parent kills the processes still working instead of waiting for the slowest.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

#: how every process of ``--jobs`` starts: forked, with its work already in memory
FORK = multiprocessing.get_context("fork")


def start_process(target: Callable[..., None], args: tuple[Any, ...], name: str,
                  daemon: bool = False) -> tuple[Connection, BaseProcess]:
    """Fork a process running ``target(writer, *args)``; the parent's end of its pipe, and the process.

    The child is forked with Ctrl-C (SIGINT) blocked, and unblocks it where an interruption ends it quietly
    (:func:`_interruptible`): a Ctrl-C that reached it while multiprocessing was still setting it up printed a
    traceback ("Process htda replay 1: ... KeyboardInterrupt")."""
    reader, writer = FORK.Pipe(duplex=False)
    process = FORK.Process(target=_interruptible, name=name, args=(target, writer, *args), daemon=daemon)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # (one that came meanwhile is raised here, in the parent)
    writer.close()  # the child's copy is now the only one: its end, or its death, is the reader's EOF
    return reader, process


def _interruptible(target: Callable[..., None], *args: Any) -> None:
    """In a forked process: ``target(*args)`` with Ctrl-C unblocked; interrupted, it ends saying nothing (the
    parent, interrupted too, reports it once)."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        target(*args)
    except KeyboardInterrupt:
        pass


def reap(reader: Connection, process: BaseProcess) -> None:
    """A process whose pipe has ended: its end closed, the process joined."""
    reader.close()
    process.join()


def kill_all(running: Iterable[tuple[Connection, BaseProcess]]) -> None:
    """Processes still working, killed and reaped (an error ended the run)."""
    for reader, process in running:
        process.kill()
        reap(reader, process)


class DiedError(RuntimeError):
    """A forked process ended without sending its outcome: killed, or out of memory."""


def send_outcome(writer: Connection, work: Callable[[], Any], what: str) -> bool:
    """In a forked process: ``work()``'s outcome sent through ``writer``, or the error it raised (which
    :func:`received` raises in the parent, as a pool's future would).  True if it sent an error.  Interrupted (Ctrl-C
    reaches the whole process group), it sends nothing and says nothing: the parent, interrupted too, reports it
    once, and a parent that was not sees a process that died."""
    try:
        message: tuple[bool, Any] = (False, work())
    except KeyboardInterrupt:
        return True
    except Exception as exc:  # noqa: BLE001 - any error, raised again in the parent
        message = (True, exc)
    try:
        writer.send(message)
    except Exception as exc:  # noqa: BLE001 - an error that does not pickle still ends the run with its message
        writer.send((True, RuntimeError(f"{what}: {message[1]!r} ({exc})")))
        return True
    return message[0]


def received(reader: Connection, what: str) -> Any:
    """The next outcome a forked process sent through ``reader`` (the error it sent is raised here);
    :class:`DiedError` if the process ended before sending one."""
    try:
        raised, outcome = reader.recv()
    except EOFError:
        raise DiedError(f"the process replaying {what} died before its end: killed, or out of memory "
                        "(try fewer --jobs)") from None
    if raised:
        raise outcome
    return outcome
