"""``_native.Lock``, the cuda and hip backends' driverkit lock: an RLock the C takes directly.

Each backend object's lock (``DriverBackend._new_lock``) is one: Python takes it with ``with``,
and a fence's compiled record and destroy take it without a method call. It must behave as
``threading.RLock`` does where driverkit uses it: re-entrant, owned by one thread, waited for
without the GIL, and interruptible while waited for.
"""

from __future__ import annotations

import threading
from types import ModuleType

import child
import pytest
from emulated_driver import REPO_ROOT, DriverName, load
from threads import JOIN_S, Waiter

import eventapi
import eventapi_cuda._native
import eventapi_hip._native

NATIVE: dict[str, ModuleType] = {"cuda": eventapi_cuda._native, "hip": eventapi_hip._native}


@pytest.fixture(params=sorted(NATIVE))
def native(request: pytest.FixtureRequest) -> ModuleType:
    return NATIVE[request.param]


def test_it_is_reentrant_and_owned_by_the_thread_that_took_it(native: ModuleType) -> None:
    lock = native.Lock()
    assert not lock._is_owned()
    assert repr(lock) == "<_native.Lock unlocked>"
    with lock:
        assert lock.acquire() is True  # again, on the same thread
        assert lock._is_owned()
        assert repr(lock).startswith("<_native.Lock locked owner=")
        assert repr(lock).endswith(" count=2>")
        seen: list[bool] = []
        other = threading.Thread(target=lambda: seen.append(lock._is_owned()))
        other.start()
        other.join(JOIN_S)
        assert seen == [False]
        lock.release()
        assert lock._is_owned()
    assert not lock._is_owned()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    with pytest.raises(TypeError, match="no arguments"):
        native.Lock(True)
    with pytest.raises(TypeError):
        type("Mine", (native.Lock,), {})  # not a base: the C takes only its own
    with pytest.raises(TypeError, match="immutable"):
        native.Lock.__enter__ = lambda self: True  # what `with` takes is what the C takes


def test_another_thread_cannot_release_it_and_waits_until_it_is_released(
    native: ModuleType,
) -> None:
    lock = native.Lock()
    lock.acquire()
    refused = Waiter(lock.release)
    refused.join()
    assert isinstance(refused.error, RuntimeError)
    trying = threading.Event()
    took: list[str] = []

    def take() -> None:
        trying.set()
        with lock:
            took.append("taken")

    waiter = Waiter(take)
    assert trying.wait(JOIN_S)
    assert took == []  # held here: only this release lets it through
    lock.release()
    waiter.join()
    assert waiter.error is None
    assert took == ["taken"]
    assert not lock._is_owned()
    with lock:  # free again
        pass


@pytest.mark.parametrize("kind", sorted(NATIVE))
def test_a_backend_objects_lock_is_the_native_one(kind: DriverName) -> None:
    load(kind)
    api = eventapi.backend(kind)
    assert type(api._lock) is NATIVE[kind].Lock  # type: ignore[attr-defined]


# The child: a thread holds the lock until the main thread says it was interrupted; the main
# thread waits for it; the holder, which needs the GIL to go on and gets it as the main thread's
# wait releases it, sends that thread SIGINT every RESEND_S until then. One signal is not
# enough: one that lands after the waiting thread released the GIL and before it blocks is seen
# only once it runs bytecode again, as with threading.RLock, whose take has the same window; a
# user presses Ctrl-C again. The handler raises KeyboardInterrupt for the first signal the take
# sees and ignores the rest, so a late one cannot interrupt the child elsewhere. The hold has
# no time limit: a take that ignored signals could never return, and the child's timeout fails
# the test.
_CHILD = """
import signal, threading
import {module} as native

RESEND_S = 0.01
lock = native.Lock()
held, waiting, interrupted = threading.Event(), threading.Event(), threading.Event()
seen = []

def on_sigint(signum, frame):
    # Seen by the take: the frame the handler runs in is the module's, whose only call left
    # is the take. One that lands sooner (in waiting.set()) is ignored, and sent again.
    if not seen and frame.f_code.co_name == "<module>":
        seen.append(signum)
        raise KeyboardInterrupt

def hold():
    with lock:
        held.set()
        waiting.wait()
        while True:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            if interrupted.wait(RESEND_S):  # a resend, as a user presses Ctrl-C again
                break

signal.signal(signal.SIGINT, on_sigint)

holder = threading.Thread(target=hold)
holder.start()
held.wait()
try:
    waiting.set()
    with lock:
        print("taken, not interrupted")
except KeyboardInterrupt:
    print("interrupted", lock._is_owned())
interrupted.set()
holder.join()
with lock:
    print("taken after")
"""


@pytest.mark.parametrize("kind", sorted(NATIVE))
def test_a_wait_for_it_is_interrupted_by_ctrl_c(kind: DriverName) -> None:
    done = child.run(_CHILD.format(module=NATIVE[kind].__name__), cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Interrupted while the holder still held it, and not taken by the interrupted wait.
    assert lines[0] == "interrupted False", done.stdout + done.stderr
    assert lines[1:] == ["taken after"], done.stdout
    assert done.stderr == "", done.stderr
