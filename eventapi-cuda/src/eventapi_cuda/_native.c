/*
 * The hot driver calls of an eventapi backend, made from C: eventapi_cuda._native and
 * eventapi_hip._native are this one file (see docs/native.md for why C, and how each
 * distribution carries it).
 *
 * It knows no driver. CUDA's and HIP's event and stream calls have the same shapes
 * (cuEventRecord / hipEventRecord (event, stream), cuEventElapsedTime / hipEventElapsedTime
 * (float *, start, end), cuStreamIsCapturing / hipStreamIsCapturing (stream, int *) ...), both
 * status types are C enums (int) with 0 for success, and both handles are pointers. The
 * backend resolves the function addresses in Python (cuGetProcAddress; the HIP library the
 * binding already loaded) and hands them to configure() with the status that means "not
 * ready", the flags of the event a stream synchronize waits on, and a Python callable that
 * builds the DriverError for a failed call. No driver header is needed to build it.
 *
 * Handles cross into Python as plain ints (the pointer's value). Nothing here checks that a
 * handle is live: the Python layer (eventapi.driverkit) refuses a closed, foreign or
 * never-recorded handle before it gets here.
 *
 * The GIL: kept for the quick calls (record, query, elapsed, create, an event's destroy, the
 * capture check), released around everything that can wait for the device (an event wait, a
 * stream synchronize, a stream destroy: HIP's waits for the stream's last command), where a
 * host function the driver runs on its own thread needs it.
 *
 * Built against the stable ABI of CPython 3.11, so one abi3 build serves 3.11 and later.
 *
 * References are counted through the interpreter's own functions (Py_IncRef, Py_DecRef), never
 * the headers' inline macros, because the headers an abi3 build is compiled with need not be
 * those of the interpreter that loads it: a cp311-abi3 wheel built on 3.12 installs on 3.11,
 * and the in-place build of a checkout serves every venv of `make matrix`. The headers of 3.12,
 * and of 3.13 before CPython gh-134989 was fixed (June 2025), treat None, True and False as
 * immortal (PEP 683) even under Py_LIMITED_API 0x030B0000: their Py_RETURN_NONE, Py_RETURN_TRUE
 * and Py_RETURN_FALSE return them without a reference. Loaded by 3.11, each such return hands
 * out a reference that was never taken, until the count reaches zero and the interpreter aborts
 * ("deallocating None"). The functions count as the running interpreter does, whatever headers
 * built the file. tests/test_native_abi.py builds it with each newer interpreter's headers it
 * finds and runs it on 3.11, and checks that no counting macro is left in it.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <time.h>

/* A new reference to `obj`: what a call returns. */
static PyObject *new_ref(PyObject *obj) {
    Py_IncRef(obj);
    return obj;
}

#define RETURN_NONE return new_ref(Py_None)
#define RETURN_TRUE return new_ref(Py_True)
#define RETURN_FALSE return new_ref(Py_False)

typedef int status_t;

typedef status_t (*create_fn)(void **out, unsigned int flags);
typedef status_t (*handle_fn)(void *handle);
typedef status_t (*record_fn)(void *event, void *stream);
typedef status_t (*elapsed_fn)(float *ms, void *start, void *end);
typedef status_t (*capturing_fn)(void *stream, int *capture_status);
typedef status_t (*stream_wait_fn)(void *stream, void *event, unsigned int flags);

/* The calls, in the order configure() takes their addresses and names. */
enum {
    EVENT_CREATE,
    EVENT_DESTROY,
    EVENT_RECORD,
    EVENT_QUERY,
    EVENT_SYNCHRONIZE,
    EVENT_ELAPSED,
    STREAM_CREATE,
    STREAM_DESTROY,
    STREAM_WAIT_EVENT,
    STREAM_SYNCHRONIZE,
    STREAM_IS_CAPTURING,
    CALL_COUNT
};

/* An invalid handle: the status a record returns for an event and a stream of two devices. */
#define STATUS_INVALID_HANDLE 400

static struct {
    int configured;
    void *fn[CALL_COUNT];
    PyObject *name[CALL_COUNT]; /* the driver's name of each call, for its DriverError */
    PyObject *fail;             /* fail(name, status) -> the exception to raise */
    status_t not_ready;
    unsigned int sync_event_flags;
    long long spin_ns;
    status_t lost; /* a sticky status: every later call fails with it without calling */
} cfg;

#define CALL(slot, type) ((type)cfg.fn[slot])

/* Raise fail(name, status) for a call that returned `status`; returns NULL. */
static PyObject *raise_status(int slot, status_t status) {
    PyObject *exc = PyObject_CallFunction(cfg.fail, "Oi", cfg.name[slot], (int)status);
    if (exc == NULL) return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DecRef(exc);
    return NULL;
}

static int ready(void) {
    if (!cfg.configured) {
        PyErr_SetString(PyExc_RuntimeError, "the native driver calls were not configured");
        return 0;
    }
    return 1;
}

/* The configured, not-lost check every call opens with; a lost device raises for `slot`. */
#define OPEN(slot)                                                                            \
    do {                                                                                      \
        if (!ready()) return NULL;                                                            \
        if (cfg.lost != 0) return raise_status((slot), cfg.lost);                             \
    } while (0)

static int arg_count(const char *fn, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", fn, want, nargs);
    return 0;
}

/* A handle from Python: a non-negative int below 2**64 (0 is the default stream). */
static int handle_arg(PyObject *obj, void **out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "a driver handle is an int, got %R", obj);
        return 0;
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *out = (void *)(uintptr_t)value;
    return 1;
}

/* An int from Python within [low, high]; OverflowError outside. long long: wide enough for
   every bound here (UINT_MAX included) on every data model. */
static int int_arg(PyObject *obj, long long low, long long high, const char *what,
                   long long *out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %R", what, obj);
        return 0;
    }
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred()) return 0;
    if (value < low || value > high) {
        PyErr_Format(PyExc_OverflowError, "%s must lie in [%lld, %lld], got %lld", what, low,
                     high, value);
        return 0;
    }
    *out = value;
    return 1;
}

/* The longest query spin configure() accepts: far beyond any sensible one, and far from an
   overflow of now_ns() + spin_ns. */
#define MAX_SPIN_NS 60000000000LL

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * Wait for an event as a fence does, with the GIL released: query it for up to spin_ns (a
 * wait on work that is done or nearly done returns as fast as a spin), then block in the
 * event's synchronize, which sleeps for a blocking-sync event. *slot names the call a failure
 * came from.
 */
static status_t wait_event(void *event, int *slot) {
    long long deadline = now_ns() + cfg.spin_ns;
    for (;;) {
        status_t status = CALL(EVENT_QUERY, handle_fn)(event);
        if (status != cfg.not_ready) {
            *slot = EVENT_QUERY;
            return status;
        }
        if (now_ns() >= deadline) break;
        cpu_relax();
    }
    *slot = EVENT_SYNCHRONIZE;
    return CALL(EVENT_SYNCHRONIZE, handle_fn)(event);
}

/* -- configure ---------------------------------------------------------------------------- */

static PyObject *configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (!arg_count("configure", nargs, 6)) return NULL;
    PyObject *addresses = args[0], *names = args[1], *fail = args[2];
    if (!PyTuple_Check(addresses) || PyTuple_Size(addresses) != CALL_COUNT ||
        !PyTuple_Check(names) || PyTuple_Size(names) != CALL_COUNT) {
        PyErr_Format(PyExc_ValueError, "configure() takes %d addresses and %d names",
                     CALL_COUNT, CALL_COUNT);
        return NULL;
    }
    if (!PyCallable_Check(fail)) {
        PyErr_SetString(PyExc_TypeError, "configure(): fail must be callable");
        return NULL;
    }
    long long not_ready, sync_flags, spin_ns;
    if (!int_arg(args[3], INT_MIN, INT_MAX, "not_ready", &not_ready) ||
        !int_arg(args[4], 0, UINT_MAX, "sync_event_flags", &sync_flags))
        return NULL;
    spin_ns = PyLong_AsLongLong(args[5]);
    if (spin_ns == -1 && PyErr_Occurred()) return NULL;
    if (spin_ns < 0 || spin_ns > MAX_SPIN_NS) {
        PyErr_SetString(PyExc_ValueError, "configure(): spin_ns must lie in [0, 60 s]");
        return NULL;
    }
    void *fn[CALL_COUNT];
    for (int i = 0; i < CALL_COUNT; i++) {
        if (!handle_arg(PyTuple_GetItem(addresses, i), &fn[i])) return NULL;
        if (fn[i] == NULL) {
            PyErr_Format(PyExc_ValueError, "configure(): no address for %R",
                         PyTuple_GetItem(names, i));
            return NULL;
        }
        if (!PyUnicode_Check(PyTuple_GetItem(names, i))) {
            PyErr_SetString(PyExc_TypeError, "configure(): names are str");
            return NULL;
        }
    }
    /* Once per process: the addresses of one driver library do not change. */
    /* Each old value is dropped after its replacement is stored: dropping it may run Python
       code (a finalizer), which must find the configuration whole. */
    for (int i = 0; i < CALL_COUNT; i++) {
        PyObject *name = PyTuple_GetItem(names, i), *old = cfg.name[i];
        Py_IncRef(name);
        cfg.name[i] = name;
        cfg.fn[i] = fn[i];
        Py_DecRef(old);
    }
    PyObject *old_fail = cfg.fail;
    Py_IncRef(fail);
    cfg.fail = fail;
    Py_DecRef(old_fail);
    cfg.not_ready = (status_t)not_ready;
    cfg.sync_event_flags = (unsigned int)sync_flags;
    cfg.spin_ns = spin_ns;
    cfg.configured = 1;
    RETURN_NONE;
}

static PyObject *lose(PyObject *self, PyObject *arg) {
    (void)self;
    long long status;
    if (!int_arg(arg, INT_MIN, INT_MAX, "status", &status)) return NULL;
    if (status == 0) {
        PyErr_SetString(PyExc_ValueError, "lose(): 0 is success, not a lost device's status");
        return NULL;
    }
    cfg.lost = (status_t)status;
    RETURN_NONE;
}

/* -- creates and destroys ----------------------------------------------------------------- */

/*
 * Create, then hand the new handle to store() in this same C call: no Python bytecode runs
 * between the driver's return and the store, so no signal handler can, and an interrupt
 * cannot lose the handle. If the store fails, the handle is destroyed here.
 */
static PyObject *create(int slot, int destroy_slot, PyObject *const *args, Py_ssize_t nargs,
                        const char *fn_name) {
    if (!arg_count(fn_name, nargs, 2)) return NULL;
    OPEN(slot);
    long long flags;
    if (!int_arg(args[0], 0, UINT_MAX, "flags", &flags)) return NULL;
    void *handle = NULL;
    status_t status = CALL(slot, create_fn)(&handle, (unsigned int)flags);
    if (status != 0) return raise_status(slot, status);
    PyObject *value = PyLong_FromVoidPtr(handle);
    PyObject *stored = value == NULL ? NULL : PyObject_CallFunctionObjArgs(args[1], value, NULL);
    Py_DecRef(value);
    if (stored == NULL) {
        CALL(destroy_slot, handle_fn)(handle); /* the error raised is the store's */
        return NULL;
    }
    Py_DecRef(stored);
    RETURN_NONE;
}

static PyObject *event_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return create(EVENT_CREATE, EVENT_DESTROY, args, nargs, "event_create");
}

static PyObject *stream_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return create(STREAM_CREATE, STREAM_DESTROY, args, nargs, "stream_create");
}

/* Destroy `handle`; with the GIL released for a stream: ROCm's hipStreamDestroy waits for the
   stream's last command, which may be a host function that needs the GIL (CUDA's returns at
   once). */
static PyObject *destroy(int slot, void *handle) {
    status_t status;
    if (slot == STREAM_DESTROY) {
        Py_BEGIN_ALLOW_THREADS
        status = CALL(slot, handle_fn)(handle);
        Py_END_ALLOW_THREADS
    } else {
        status = CALL(slot, handle_fn)(handle);
    }
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

static PyObject *destroy_handle(int slot, PyObject *arg) {
    OPEN(slot);
    void *handle;
    if (!handle_arg(arg, &handle)) return NULL;
    return destroy(slot, handle);
}

static PyObject *event_destroy(PyObject *self, PyObject *arg) {
    (void)self;
    return destroy_handle(EVENT_DESTROY, arg);
}

static PyObject *stream_destroy(PyObject *self, PyObject *arg) {
    (void)self;
    return destroy_handle(STREAM_DESTROY, arg);
}

/*
 * Take the handle out of the wrapper that holds it and destroy it, in this same C call: read()
 * gives the handle, clear() leaves the wrapper without it, and the driver's destroy follows
 * with no Python bytecode between, so no signal handler can run between the three. An
 * interrupt lands before (the wrapper still holds the handle, and its finalizer destroys it)
 * or after (nothing is left to destroy, and nothing is destroyed twice). read and clear are
 * eventapi.driverkit.raw_take's pair.
 */
static PyObject *destroy_from(int slot, PyObject *const *args, Py_ssize_t nargs,
                              const char *fn_name) {
    if (!arg_count(fn_name, nargs, 2)) return NULL;
    OPEN(slot);
    PyObject *value = PyObject_CallNoArgs(args[0]);
    if (value == NULL) return NULL;
    void *handle;
    int ok = handle_arg(value, &handle);
    Py_DecRef(value);
    if (!ok) return NULL;
    PyObject *cleared = PyObject_CallNoArgs(args[1]);
    if (cleared == NULL) return NULL; /* still the wrapper's, which destroys it later */
    Py_DecRef(cleared);
    return destroy(slot, handle);
}

static PyObject *event_destroy_from(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return destroy_from(EVENT_DESTROY, args, nargs, "event_destroy_from");
}

static PyObject *stream_destroy_from(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return destroy_from(STREAM_DESTROY, args, nargs, "stream_destroy_from");
}

/* -- records, queries, readings ----------------------------------------------------------- */

static int two_handles(const char *fn_name, PyObject *const *args, Py_ssize_t nargs,
                       void **first, void **second) {
    return arg_count(fn_name, nargs, 2) && handle_arg(args[0], first) &&
           handle_arg(args[1], second);
}

static PyObject *event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    OPEN(EVENT_RECORD);
    void *event, *stream;
    if (!two_handles("event_record", args, nargs, &event, &stream)) return NULL;
    status_t status = CALL(EVENT_RECORD, record_fn)(event, stream);
    if (status != 0) return raise_status(EVENT_RECORD, status);
    RETURN_NONE;
}

/* The capture check and, unless the stream captures, the record: True when recorded. */
static PyObject *event_record_unless_capturing(PyObject *self, PyObject *const *args,
                                               Py_ssize_t nargs) {
    (void)self;
    OPEN(STREAM_IS_CAPTURING);
    void *event, *stream;
    if (!two_handles("event_record_unless_capturing", args, nargs, &event, &stream))
        return NULL;
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    if (capturing != 0) RETURN_FALSE; /* active and invalidated both refuse a record */
    status = CALL(EVENT_RECORD, record_fn)(event, stream);
    if (status != 0) return raise_status(EVENT_RECORD, status);
    RETURN_TRUE;
}

static PyObject *stream_is_capturing(PyObject *self, PyObject *arg) {
    (void)self;
    OPEN(STREAM_IS_CAPTURING);
    void *stream;
    if (!handle_arg(arg, &stream)) return NULL;
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    return PyBool_FromLong(capturing != 0);
}

static PyObject *event_query(PyObject *self, PyObject *arg) {
    (void)self;
    OPEN(EVENT_QUERY);
    void *event;
    if (!handle_arg(arg, &event)) return NULL;
    status_t status = CALL(EVENT_QUERY, handle_fn)(event);
    if (status == 0) RETURN_TRUE;
    if (status == cfg.not_ready) RETURN_FALSE;
    return raise_status(EVENT_QUERY, status);
}

static PyObject *stream_wait_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    OPEN(STREAM_WAIT_EVENT);
    void *stream, *event;
    if (!two_handles("stream_wait_event", args, nargs, &stream, &event)) return NULL;
    status_t status = CALL(STREAM_WAIT_EVENT, stream_wait_fn)(stream, event, 0);
    if (status != 0) return raise_status(STREAM_WAIT_EVENT, status);
    RETURN_NONE;
}

/*
 * Milliseconds as integer nanoseconds, rounded half to even as Python's round() does: the
 * float is the driver's integer tick count divided into milliseconds, and truncating would
 * bias a reading such as 1.5 us (0.0014999999 ms) one nanosecond low.
 */
static PyObject *ns_from_ms(float ms) {
    double ns = (double)ms * 1000000.0;
    /* Beyond 2**62 ns (146 years) no reading is real, and converting one past 2**63 to a long
       long would be undefined. */
    if (!isfinite(ns) || fabs(ns) > 4611686018427387904.0) {
        PyErr_SetString(PyExc_ValueError,
                        "the driver read an elapsed time that is not finite or out of range");
        return NULL;
    }
    return PyLong_FromLongLong((long long)nearbyint(ns));
}

static PyObject *event_elapsed_ns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    OPEN(EVENT_ELAPSED);
    void *start, *end;
    if (!two_handles("event_elapsed_ns", args, nargs, &start, &end)) return NULL;
    float ms = 0.0f;
    status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms, start, end);
    if (status != 0) return raise_status(EVENT_ELAPSED, status);
    return ns_from_ms(ms);
}

/* The readings of many pairs in one call, unclamped; raises the first failure. */
static PyObject *event_elapsed_ns_many(PyObject *self, PyObject *const *args,
                                       Py_ssize_t nargs) {
    (void)self;
    if (!arg_count("event_elapsed_ns_many", nargs, 2)) return NULL;
    OPEN(EVENT_ELAPSED);
    PyObject *starts = args[0], *ends = args[1];
    if (!PyList_Check(starts) || !PyList_Check(ends)) {
        PyErr_SetString(PyExc_TypeError, "event_elapsed_ns_many() takes two lists");
        return NULL;
    }
    Py_ssize_t count = PyList_Size(starts);
    if (PyList_Size(ends) != count) {
        PyErr_Format(PyExc_ValueError, "event_elapsed_ns_many(): %zd starts but %zd ends",
                     count, PyList_Size(ends));
        return NULL;
    }
    PyObject *readings = PyList_New(count);
    if (readings == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* Borrowed, and used before any Python code can run; but the allocations above and
           below can start a garbage collection (on 3.11), whose finalizers may shrink a list. */
        PyObject *start_obj = PyList_GetItem(starts, i), *end_obj = PyList_GetItem(ends, i);
        if (start_obj == NULL || end_obj == NULL) {
            PyErr_SetString(PyExc_RuntimeError,
                            "event_elapsed_ns_many(): a list changed size during the call");
            goto fail;
        }
        void *start, *end;
        if (!handle_arg(start_obj, &start) || !handle_arg(end_obj, &end)) goto fail;
        float ms = 0.0f;
        status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms, start, end);
        if (status != 0) {
            raise_status(EVENT_ELAPSED, status);
            goto fail;
        }
        PyObject *ns = ns_from_ms(ms);
        if (ns == NULL) goto fail;
        PyList_SetItem(readings, i, ns); /* steals ns */
    }
    return readings;
fail:
    Py_DecRef(readings);
    return NULL;
}

/* -- waits (the GIL released) ------------------------------------------------------------- */

static PyObject *event_wait(PyObject *self, PyObject *arg) {
    (void)self;
    OPEN(EVENT_SYNCHRONIZE);
    void *event;
    if (!handle_arg(arg, &event)) return NULL;
    int slot;
    status_t status;
    Py_BEGIN_ALLOW_THREADS
    status = wait_event(event, &slot);
    Py_END_ALLOW_THREADS
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

/*
 * Wait until `stream` drained, costing no more CPU than a fence wait: record an event created
 * with sync_event_flags (blocking sync, no timing) and wait for it as event_wait does; then
 * the driver's own stream synchronize, which returns at once on a drained stream, reports
 * what it alone reports (an earlier asynchronous fault) under its own name. Alone, the
 * driver's synchronize follows the context's scheduling flag, whose default spins a core for
 * the whole wait. It is made alone where the event cannot stand in: on a capturing stream
 * (where it fails and invalidates the capture, as the caller expects) and on a stream of
 * another device than the current one (whose record refuses the event).
 */
static PyObject *stream_synchronize(PyObject *self, PyObject *arg) {
    (void)self;
    OPEN(STREAM_SYNCHRONIZE);
    void *stream;
    if (!handle_arg(arg, &stream)) return NULL;
    int capturing = 0, slot = STREAM_IS_CAPTURING;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(slot, status);
    void *event = NULL;
    if (capturing == 0) {
        slot = EVENT_CREATE;
        status = CALL(EVENT_CREATE, create_fn)(&event, cfg.sync_event_flags);
        if (status != 0) return raise_status(slot, status);
        slot = EVENT_RECORD;
        status = CALL(EVENT_RECORD, record_fn)(event, stream);
        if (status == STATUS_INVALID_HANDLE) {
            status = CALL(EVENT_DESTROY, handle_fn)(event);
            event = NULL;
            if (status != 0) return raise_status(EVENT_DESTROY, status);
        } else if (status != 0) {
            CALL(EVENT_DESTROY, handle_fn)(event); /* the error raised is the record's */
            return raise_status(slot, status);
        }
    }
    Py_BEGIN_ALLOW_THREADS
    status = event != NULL ? wait_event(event, &slot) : 0;
    if (status == 0) {
        slot = STREAM_SYNCHRONIZE;
        status = CALL(STREAM_SYNCHRONIZE, handle_fn)(stream);
    }
    Py_END_ALLOW_THREADS
    if (event != NULL) {
        status_t destroyed = CALL(EVENT_DESTROY, handle_fn)(event);
        if (status == 0 && destroyed != 0) {
            status = destroyed;
            slot = EVENT_DESTROY;
        }
    }
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

/* -- the module --------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(addresses, names, fail, not_ready, sync_event_flags, spin_ns)"},
    {"lose", lose, METH_O, "lose(status): every later call fails with status, uncalled"},
    {"event_create", (PyCFunction)(void (*)(void))event_create, METH_FASTCALL,
     "event_create(flags, store): create an event and store(handle) in the same call"},
    {"stream_create", (PyCFunction)(void (*)(void))stream_create, METH_FASTCALL,
     "stream_create(flags, store): create a stream and store(handle) in the same call"},
    {"event_destroy", event_destroy, METH_O, "event_destroy(event)"},
    {"stream_destroy", stream_destroy, METH_O, "stream_destroy(stream)"},
    {"event_destroy_from", (PyCFunction)(void (*)(void))event_destroy_from, METH_FASTCALL,
     "event_destroy_from(read, clear): take read()'s event out with clear() and destroy it"},
    {"stream_destroy_from", (PyCFunction)(void (*)(void))stream_destroy_from, METH_FASTCALL,
     "stream_destroy_from(read, clear): take read()'s stream out with clear() and destroy it"},
    {"event_record", (PyCFunction)(void (*)(void))event_record, METH_FASTCALL,
     "event_record(event, stream)"},
    {"event_record_unless_capturing",
     (PyCFunction)(void (*)(void))event_record_unless_capturing, METH_FASTCALL,
     "event_record_unless_capturing(event, stream) -> bool: True when recorded"},
    {"stream_is_capturing", stream_is_capturing, METH_O, "stream_is_capturing(stream) -> bool"},
    {"event_query", event_query, METH_O, "event_query(event) -> bool"},
    {"stream_wait_event", (PyCFunction)(void (*)(void))stream_wait_event, METH_FASTCALL,
     "stream_wait_event(stream, event)"},
    {"event_elapsed_ns", (PyCFunction)(void (*)(void))event_elapsed_ns, METH_FASTCALL,
     "event_elapsed_ns(start, end) -> int, unclamped"},
    {"event_elapsed_ns_many", (PyCFunction)(void (*)(void))event_elapsed_ns_many,
     METH_FASTCALL, "event_elapsed_ns_many(starts, ends) -> list[int], unclamped"},
    {"event_wait", event_wait, METH_O, "event_wait(event): query spin, then synchronize"},
    {"stream_synchronize", stream_synchronize, METH_O,
     "stream_synchronize(stream): wait on a blocking-sync event recorded into it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The hot driver calls, made from C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
