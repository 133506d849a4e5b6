"""How the cuda backend's compiled calls find the driver's functions (docs/native.md).

``_native.c`` declares one prototype per driver call; each address is looked up with
``cuGetProcAddress`` at the CUDA version whose ABI of that name has that prototype, never at the
driver's own version (a newer ``_v2`` of a name may take other arguments), and with the
per-thread default stream's variants exactly when cuda.bindings resolves its own calls so
(``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM``), so that a raw 0 stream means the same stream
to both. The emulated CUDA driver logs every lookup (``emu_cuda_lookup``); each case runs in a
fresh process, where the backend's first use makes the lookups.
"""

from __future__ import annotations

import pytest
from child import run_json
from emulated_driver import build, preload_env

_CHILD = """
import ctypes, json
import eventapi
from eventapi_cuda._backend import _NATIVE_CALLS

api = eventapi.backend("cuda")
stream = api.stream_create_non_blocking()
api.stream_synchronize(stream)  # one compiled call, through the addresses looked up
api.stream_destroy(stream)
lib = ctypes.CDLL(None)
lib.emu_cuda_lookups.restype = ctypes.c_long
name, version, flags = ctypes.create_string_buffer(64), ctypes.c_int(), ctypes.c_ulonglong()
lookups = []
for i in range(lib.emu_cuda_lookups()):
    lib.emu_cuda_lookup(
        ctypes.c_long(i), name, ctypes.c_size_t(64), ctypes.byref(version), ctypes.byref(flags)
    )
    lookups.append([name.value.decode(), version.value, flags.value])
print(json.dumps({{"lookups": lookups, "native": [[n, list(abis)] for n, abis in _NATIVE_CALLS],
                  "driver": {driver}}}))
"""

PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM; 0 is the default (legacy)


@pytest.mark.parametrize("driver", [13000, 13090, 99000])
@pytest.mark.parametrize("per_thread", [False, True])
def test_each_compiled_call_is_looked_up_at_its_own_abi_with_the_bindings_stream_flags(
    driver: int, per_thread: bool
) -> None:
    build()
    env = preload_env("cuda")
    env["EMU_CUDA_DRIVER_VERSION"] = str(driver)
    env.pop("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", None)
    if per_thread:
        env["CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM"] = "1"
    result = run_json(_CHILD.format(driver=driver), env)
    lookups = [tuple(entry) for entry in result["lookups"]]
    native = result["native"]
    # The backend looks its calls up last, in the order it declares them.
    ours = lookups[-len(native) :]
    assert [name for name, _, _ in ours] == [name for name, _ in native]
    bindings = {name: (version, flags) for name, version, flags in lookups[: -len(native)]}
    for (name, version, flags), (_, abis) in zip(ours, native, strict=True):
        # The newest ABI the driver has whose prototype is the one declared in C: never the
        # driver's version itself, which may name a later ABI of the same call.
        assert version == max(abi for abi in abis if abi <= driver), (name, version, abis)
        assert version != driver or driver in abis
        # The same default-stream variant as cuda.bindings took for its own call of the name.
        assert flags == (PER_THREAD if per_thread else 0), name
        assert flags == bindings[name][1], (name, flags, bindings[name])
