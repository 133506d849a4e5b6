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
#include <stdio.h>
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

/* -- the backend's lock ------------------------------------------------------------------- */

/*
 * Lock: a reentrant lock, as threading.RLock is, for the backends' driverkit lock
 * (DriverBackend._new_lock). Python takes it with `with`; a fence's record and destroy below
 * take it by a few stores, without calling a method: through threading.RLock's methods the
 * two sections a fence runs cost about a tenth of the fence. A contended take waits with the
 * GIL released and stays interruptible, as RLock's does: a signal's handler runs, and what it
 * raises (KeyboardInterrupt) is raised by the take. Only `with`, acquire() (blocking),
 * release() and _is_owned() are offered: driverkit uses `with` alone. (No timeouts, no weak
 * references, no _release_save: a threading.Condition over it would not wait while nested.)
 */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    unsigned long owner; /* the thread that holds it, while count > 0 */
    unsigned long count; /* how many times the owner took it */
} reentrant_lock;

static PyTypeObject *lock_type; /* Lock, exact: it is not subclassable */

/* Take `l` for the calling thread (again, if it holds it): 1, or 0 with the error set. */
static int lock_take(reentrant_lock *l) {
    unsigned long me = PyThread_get_thread_ident();
    if (l->count > 0 && l->owner == me) {
        if (l->count == ULONG_MAX) {
            PyErr_SetString(PyExc_OverflowError, "Lock taken too many times");
            return 0;
        }
        l->count++;
        return 1;
    }
    if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK)) {
        PyLockStatus got;
        do {
            Py_BEGIN_ALLOW_THREADS;
            got = PyThread_acquire_lock_timed(l->lock, -1, 1);
            Py_END_ALLOW_THREADS;
            if (got == PY_LOCK_INTR && Py_MakePendingCalls() < 0) return 0;
            if (got == PY_LOCK_FAILURE) {
                PyErr_SetString(PyExc_RuntimeError, "Lock: the wait for it failed");
                return 0;
            }
        } while (got != PY_LOCK_ACQUIRED);
    }
    l->owner = me;
    l->count = 1;
    return 1;
}

/* Give `l` back once (the calling thread holds it): 1, or 0 with the error set. */
static int lock_give(reentrant_lock *l) {
    if (l->count == 0 || l->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return 0;
    }
    if (--l->count == 0) {
        l->owner = 0;
        PyThread_release_lock(l->lock);
    }
    return 1;
}

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_Size(args) != 0 || (kwds != NULL && PyDict_Size(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    reentrant_lock *l = (reentrant_lock *)alloc(type, 0);
    if (l == NULL) return NULL;
    l->owner = 0;
    l->count = 0;
    l->lock = PyThread_allocate_lock();
    if (l->lock == NULL) {
        Py_DecRef((PyObject *)l);
        PyErr_SetString(PyExc_MemoryError, "Lock(): no lock could be allocated");
        return NULL;
    }
    return (PyObject *)l;
}

static void lock_dealloc(PyObject *self) {
    reentrant_lock *l = (reentrant_lock *)self;
    PyTypeObject *type = Py_TYPE(self);
    if (l->lock != NULL) {
        if (l->count > 0) PyThread_release_lock(l->lock); /* as RLock's: a forked child's */
        PyThread_free_lock(l->lock);
    }
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DecRef((PyObject *)type);
}

static PyObject *lock_acquire(PyObject *self, PyObject *unused) {
    (void)unused;
    if (!lock_take((reentrant_lock *)self)) return NULL;
    RETURN_TRUE;
}

static PyObject *lock_release(PyObject *self, PyObject *unused) {
    (void)unused;
    if (!lock_give((reentrant_lock *)self)) return NULL;
    RETURN_NONE;
}

static PyObject *lock_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    (void)nargs;
    return lock_release(self, NULL);
}

static PyObject *lock_is_owned(PyObject *self, PyObject *unused) {
    (void)unused;
    reentrant_lock *l = (reentrant_lock *)self;
    if (l->count > 0 && l->owner == PyThread_get_thread_ident()) RETURN_TRUE;
    RETURN_FALSE;
}

static PyObject *lock_repr(PyObject *self) {
    reentrant_lock *l = (reentrant_lock *)self;
    if (l->count == 0) return PyUnicode_FromString("<_native.Lock unlocked>");
    return PyUnicode_FromFormat("<_native.Lock locked owner=%lu count=%lu>", l->owner, l->count);
}

static PyMethodDef lock_methods[] = {
    {"acquire", lock_acquire, METH_NOARGS, "acquire() -> True: wait for the lock, and take it"},
    {"release", lock_release, METH_NOARGS, "release(): give the lock back once"},
    {"__enter__", lock_acquire, METH_NOARGS, "acquire()"},
    {"__exit__", (PyCFunction)(void (*)(void))lock_exit, METH_FASTCALL, "release()"},
    {"_is_owned", lock_is_owned, METH_NOARGS, "_is_owned() -> bool: the caller holds it"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot lock_slots[] = {
    {Py_tp_doc, "A reentrant lock, as threading.RLock, that _native.FastPath takes directly."},
    {Py_tp_new, lock_new},
    {Py_tp_dealloc, lock_dealloc},
    {Py_tp_repr, lock_repr},
    {Py_tp_methods, lock_methods},
    {0, NULL},
};

static PyType_Spec lock_spec = {
    /* Immutable: a Python __enter__ set on it would skip what the C path still takes. */
    "_native.Lock", sizeof(reentrant_lock), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    lock_slots,
};

/* -- the fast path over eventapi.driverkit's handles -------------------------------------- */

/*
 * FastPath, a base class of the cuda and hip backends: six of eventapi.SupportsFastPath's
 * calls (a window's record; a fence's stream adoption, record, query and destroy; a collect's
 * readings) made on the driverkit handles themselves, so that the handle checks and the driver
 * call are one C call. Only the common case is taken: a handle of this backend, open (and
 * recorded, where a call needs it), on a thread the backend is bound to, with positional
 * arguments, and for a fence's record and destroy a spare driver event to take or room to
 * keep one. Anything else is handed to the driverkit method itself, which refuses it or makes
 * the call, with the same errors.
 *
 * The driverkit methods hold the backend's lock from their checks to the driver call, so that
 * a destroy on another thread cannot come between. The record, query and readings rely on the
 * GIL instead: between reading a handle's state and the driver call nothing allocates a Python
 * object that the collector tracks, calls Python code or releases the GIL, so no other thread
 * and no finalizer runs in between (the driverkit destroy marks a handle closed before it
 * reaches the driver). A fence's record and destroy change the object's own bookkeeping (its
 * spare list and live count, which its other methods change across several statements), so
 * they take the object's lock as the driverkit methods do, and run no Python code while they
 * hold it. What is read and written of a handle (its slots' own descriptors) and of the
 * object (its attributes' names), and the methods, come from
 * eventapi.driverkit.compiled_fast_path(): the handle classes and driverkit own them. The
 * last argument of configure_fast_path is the backend module's own DriverCalls, whose `lost`
 * is what its classes' _context_lost() returns: read here as an attribute, not called.
 */

enum {
    SLOT_OWNER,
    SLOT_CLOSED,
    SLOT_RAW,
    SLOT_USERS,
    SLOT_RECORDED,
    SLOT_REACHED,
    SLOT_SPARE,
    SLOT_COUNT
};
enum { BY_RECORD, BY_QUERY, BY_ELAPSED_MANY, BY_RECORD_NEW, BY_DESTROY, BY_ADOPT, BY_COUNT };
enum {
    STATE_LOCK,
    STATE_SPARES,
    STATE_LIVE_EVENTS,
    STATE_FORKED,
    STATE_FINALIZED,
    STATE_SPARE_EVENTS,
    STATE_COUNT
};

static struct {
    int configured;
    PyObject *event_type, *stream_type;
    PyObject *slot[SLOT_COUNT];
    descrgetfunc get[SLOT_COUNT];
    descrsetfunc set[SLOT_COUNT];
    PyObject *thread_state, *bound; /* the backend's per-thread state, and its "bound" flag */
    PyObject *by[BY_COUNT];         /* the driverkit methods, for every case not taken here */
    PyObject *state[STATE_COUNT];   /* the names of the backend object's own attributes */
    PyObject *record_failed;        /* record_failed(backend, event): a spare's record failed */
    PyObject *no_raw, *released;    /* a new wrapper's driver handle; a handed-on one's users */
    PyObject *acquire, *release;    /* the lock's method names */
    PyObject *calls, *lost;         /* the backend's DriverCalls, and the name "lost" */
    PyObject *zero;                 /* a new handle's users */
    newfunc event_new;              /* the event class's tp_new */
    int plain_event;                /* it is object's: the class is plain Python */
    PyObject *no_args;              /* () for it */
} fp;

#define CONFIGURE_ARGS 11

static PyObject *configure_fast_path(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (!arg_count("configure_fast_path", nargs, CONFIGURE_ARGS)) return NULL;
    PyObject *slots = args[2], *methods = args[5], *state = args[6];
    int ok = PyType_Check(args[0]) && PyType_Check(args[1]) && PyTuple_Check(slots) &&
             PyTuple_Size(slots) == SLOT_COUNT && PyUnicode_Check(args[3]) &&
             PyUnicode_Check(args[4]) && PyTuple_Check(methods) &&
             PyTuple_Size(methods) == BY_COUNT && PyTuple_Check(state) &&
             PyTuple_Size(state) == STATE_COUNT && PyCallable_Check(args[7]) &&
             PyLong_Check(args[9]);
    for (int i = 0; ok && i < STATE_COUNT; i++) ok = PyUnicode_Check(PyTuple_GetItem(state, i));
    if (!ok) {
        PyErr_Format(PyExc_TypeError,
                     "configure_fast_path(event_type, stream_type, %d slots, thread_state, "
                     "bound, %d methods, %d state names, record_failed, no_raw, released, calls)",
                     SLOT_COUNT, BY_COUNT, STATE_COUNT);
        return NULL;
    }
    descrgetfunc get[SLOT_COUNT];
    descrsetfunc set[SLOT_COUNT];
    for (int i = 0; i < SLOT_COUNT; i++) {
        PyTypeObject *kind = Py_TYPE(PyTuple_GetItem(slots, i));
        get[i] = (descrgetfunc)PyType_GetSlot(kind, Py_tp_descr_get);
        set[i] = (descrsetfunc)PyType_GetSlot(kind, Py_tp_descr_set);
        if (get[i] == NULL || set[i] == NULL) {
            PyErr_SetString(PyExc_TypeError, "configure_fast_path(): a slot is a data descriptor");
            return NULL;
        }
    }
    for (int i = 0; i < BY_COUNT; i++) {
        if (!PyCallable_Check(PyTuple_GetItem(methods, i))) {
            PyErr_SetString(PyExc_TypeError, "configure_fast_path(): methods are callable");
            return NULL;
        }
    }
    PyObject *acquire = PyUnicode_InternFromString("acquire");
    PyObject *release = PyUnicode_InternFromString("release");
    PyObject *lost = PyUnicode_InternFromString("lost");
    PyObject *zero = PyLong_FromLong(0);
    PyObject *no_args = PyTuple_New(0);
    newfunc event_new = (newfunc)PyType_GetSlot((PyTypeObject *)args[0], Py_tp_new);
    if (acquire == NULL || release == NULL || lost == NULL || zero == NULL || no_args == NULL ||
        event_new == NULL) {
        Py_DecRef(acquire);
        Py_DecRef(release);
        Py_DecRef(lost);
        Py_DecRef(zero);
        Py_DecRef(no_args);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the event class has no tp_new");
        return NULL;
    }
    /* Kept for the process, as configure()'s: the classes and functions live as long. */
    fp.event_type = new_ref(args[0]);
    fp.stream_type = new_ref(args[1]);
    fp.thread_state = new_ref(args[3]);
    fp.bound = new_ref(args[4]);
    for (int i = 0; i < SLOT_COUNT; i++) {
        fp.slot[i] = new_ref(PyTuple_GetItem(slots, i));
        fp.get[i] = get[i];
        fp.set[i] = set[i];
    }
    for (int i = 0; i < BY_COUNT; i++) fp.by[i] = new_ref(PyTuple_GetItem(methods, i));
    for (int i = 0; i < STATE_COUNT; i++) fp.state[i] = new_ref(PyTuple_GetItem(state, i));
    fp.record_failed = new_ref(args[7]);
    fp.no_raw = new_ref(args[8]);
    fp.released = new_ref(args[9]);
    fp.acquire = acquire;
    fp.release = release;
    fp.calls = new_ref(args[10]);
    fp.lost = lost;
    fp.zero = zero;
    fp.no_args = no_args;
    fp.event_new = event_new;
    fp.plain_event = event_new == (newfunc)PyType_GetSlot(&PyBaseObject_Type, Py_tp_new);
    fp.configured = 1;
    RETURN_NONE;
}

/* The driverkit method `which` with (self, *args, **kwnames): every case not taken here. */
static PyObject *hand_over(int which, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    if (!fp.configured) {
        PyErr_SetString(PyExc_RuntimeError, "the native fast path was not configured");
        return NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    PyObject *positional = PyTuple_New(nargs + 1), *keywords = NULL, *result = NULL;
    if (positional == NULL) return NULL;
    PyTuple_SetItem(positional, 0, new_ref(self)); /* steals */
    for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SetItem(positional, i + 1, new_ref(args[i]));
    if (nkw > 0) {
        keywords = PyDict_New();
        if (keywords == NULL) goto done;
        for (Py_ssize_t i = 0; i < nkw; i++) {
            if (PyDict_SetItem(keywords, PyTuple_GetItem(kwnames, i), args[nargs + i]) < 0)
                goto done;
        }
    }
    result = PyObject_Call(fp.by[which], positional, keywords);
done:
    Py_DecRef(positional);
    Py_DecRef(keywords);
    return result;
}

/* A new reference to `obj`'s slot `i`, or NULL (with the error cleared) when it is unset. */
static PyObject *slot_value(int i, PyObject *obj) {
    PyObject *value = fp.get[i](fp.slot[i], obj, (PyObject *)Py_TYPE(obj));
    if (value == NULL) PyErr_Clear();
    return value;
}

/* 1 when `obj`'s slot `i` is `expected` (compared by identity), else 0. */
static int slot_is(int i, PyObject *obj, PyObject *expected) {
    PyObject *value = slot_value(i, obj);
    int same = value == expected;
    Py_DecRef(value);
    return same;
}

/* 1 when `handle` is of `kind`, `owner`'s and open; its driver handle in *raw. */
static int own_open(PyObject *handle, PyObject *kind, PyObject *owner, void **raw) {
    if ((PyObject *)Py_TYPE(handle) != kind || !slot_is(SLOT_OWNER, handle, owner) ||
        !slot_is(SLOT_CLOSED, handle, Py_False))
        return 0;
    PyObject *value = slot_value(SLOT_RAW, handle);
    if (value == NULL) return 0;
    int ok = PyLong_Check(value) && handle_arg(value, raw);
    if (!ok) PyErr_Clear(); /* not a driver handle (not created yet): the method says so */
    Py_DecRef(value);
    return ok;
}

/* 1 when the calling thread is bound to `self` (the backend's thread_state.bound is True).
   Asked first: the per-thread state of a new thread is allocated here. */
static int thread_bound(PyObject *self) {
    PyObject *state = PyObject_GetAttr(self, fp.thread_state);
    if (state == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *bound = PyObject_GetAttr(state, fp.bound);
    Py_DecRef(state);
    if (bound == NULL) {
        PyErr_Clear();
        return 0;
    }
    int yes = bound == Py_True;
    Py_DecRef(bound);
    return yes;
}

static PyObject *fast_record_unless_capturing(PyObject *self, PyObject *const *args,
                                              Py_ssize_t nargs, PyObject *kwnames) {
    void *event, *stream;
    if (!fp.configured || kwnames != NULL || nargs != 2 || !thread_bound(self) ||
        !own_open(args[0], fp.event_type, self, &event) ||
        !own_open(args[1], fp.stream_type, self, &stream))
        return hand_over(BY_RECORD, self, args, nargs, kwnames);
    OPEN(STREAM_IS_CAPTURING);
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    if (capturing != 0) RETURN_FALSE;
    status = CALL(EVENT_RECORD, record_fn)(event, stream);
    if (status != 0) return raise_status(EVENT_RECORD, status);
    if (fp.set[SLOT_REACHED](fp.slot[SLOT_REACHED], args[0], Py_False) < 0 ||
        fp.set[SLOT_RECORDED](fp.slot[SLOT_RECORDED], args[0], Py_True) < 0)
        return NULL;
    RETURN_TRUE;
}

static PyObject *fast_event_query(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    void *event;
    if (!fp.configured || kwnames != NULL || nargs != 1 || !thread_bound(self) ||
        !own_open(args[0], fp.event_type, self, &event) ||
        !slot_is(SLOT_RECORDED, args[0], Py_True))
        return hand_over(BY_QUERY, self, args, nargs, kwnames);
    OPEN(EVENT_QUERY);
    status_t status = CALL(EVENT_QUERY, handle_fn)(event);
    if (status == cfg.not_ready) RETURN_FALSE;
    if (status != 0) return raise_status(EVENT_QUERY, status);
    if (fp.set[SLOT_REACHED](fp.slot[SLOT_REACHED], args[0], Py_True) < 0) return NULL;
    RETURN_TRUE;
}

/* The raw handles of a list of this backend's open, recorded events into raws; 0 if any is
   not one (or the list changed size), and nothing is raised. */
static int recorded_raws(PyObject *self, PyObject *events, Py_ssize_t count, void **raws) {
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *event = PyList_GetItem(events, i); /* borrowed: nothing runs meanwhile */
        if (event == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (!own_open(event, fp.event_type, self, &raws[i]) ||
            !slot_is(SLOT_RECORDED, event, Py_True))
            return 0;
    }
    return 1;
}

static PyObject *fast_event_elapsed_many(PyObject *self, PyObject *const *args,
                                         Py_ssize_t nargs, PyObject *kwnames) {
    if (!fp.configured || kwnames != NULL || nargs != 2 || !PyList_Check(args[0]) ||
        !PyList_Check(args[1]) || PyList_Size(args[0]) != PyList_Size(args[1]) ||
        !thread_bound(self))
        return hand_over(BY_ELAPSED_MANY, self, args, nargs, kwnames);
    Py_ssize_t count = PyList_Size(args[0]);
    /* Allocated before the handles are read: a list is tracked by the collector, whose
       finalizers could destroy a handle between its check and its reading. */
    PyObject *readings = PyList_New(count);
    void **raws = PyMem_Malloc(sizeof(void *) * (size_t)(2 * count + 1));
    if (readings == NULL || raws == NULL) {
        Py_DecRef(readings);
        PyMem_Free(raws);
        return PyErr_NoMemory();
    }
    if (!recorded_raws(self, args[0], count, raws) ||
        !recorded_raws(self, args[1], count, raws + count)) {
        Py_DecRef(readings);
        PyMem_Free(raws);
        return hand_over(BY_ELAPSED_MANY, self, args, nargs, kwnames);
    }
    if (!ready()) goto fail;
    if (cfg.lost != 0) {
        raise_status(EVENT_ELAPSED, cfg.lost);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        float ms = 0.0f;
        status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms, raws[i], raws[count + i]);
        if (status != 0) {
            raise_status(EVENT_ELAPSED, status);
            goto fail;
        }
        PyObject *ns = ns_from_ms(ms); /* an int: not tracked by the collector */
        if (ns == NULL) goto fail;
        if (PyLong_AsLongLong(ns) < 0) { /* clamped at 0, as the driverkit method does */
            Py_DecRef(ns);
            ns = PyLong_FromLong(0);
            if (ns == NULL) goto fail;
        }
        PyList_SetItem(readings, i, ns); /* steals ns */
    }
    PyMem_Free(raws);
    return readings;
fail:
    PyMem_Free(raws);
    Py_DecRef(readings);
    return NULL;
}

/* adopt_stream(stream): a stream of this backend, open, is its own handle, as it is. */
static PyObject *fast_adopt_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    if (fp.configured && kwnames == NULL && nargs == 1 &&
        (PyObject *)Py_TYPE(args[0]) == fp.stream_type && slot_is(SLOT_OWNER, args[0], self) &&
        slot_is(SLOT_CLOSED, args[0], Py_False))
        return new_ref(args[0]);
    return hand_over(BY_ADOPT, self, args, nargs, kwnames);
}

/* -- a fence's record and destroy, from and to the spares ---------------------------------- */

/* The backend's lock, acquired: a new reference to it, or NULL with the error set (an
   interrupt while another thread held it). An acquire that does not wait runs no Python code
   and no signal handler. This module's Lock is taken directly; any other through its
   acquire() and release() methods. */
static PyObject *lock_taken(PyObject *self) {
    PyObject *lock = PyObject_GetAttr(self, fp.state[STATE_LOCK]);
    if (lock == NULL) return NULL;
    if (Py_TYPE(lock) == lock_type) { /* this module's own: taken without a call */
        if (lock_take((reentrant_lock *)lock)) return lock;
        Py_DecRef(lock);
        return NULL;
    }
    PyObject *got = PyObject_CallMethodObjArgs(lock, fp.acquire, NULL);
    if (got == NULL) {
        Py_DecRef(lock);
        return NULL;
    }
    Py_DecRef(got);
    return lock;
}

/* Release `lock` (this thread holds it) and drop the reference; 0 with the error set. */
static int lock_given_back(PyObject *lock) {
    if (Py_TYPE(lock) == lock_type) {
        int given = lock_give((reentrant_lock *)lock);
        Py_DecRef(lock);
        return given;
    }
    PyObject *done = PyObject_CallMethodObjArgs(lock, fp.release, NULL);
    Py_DecRef(lock);
    if (done == NULL) return 0;
    Py_DecRef(done);
    return 1;
}

/* 1 when the backend object's attribute `i` is `expected` (by identity), else 0, no error. */
static int state_is(PyObject *self, int i, PyObject *expected) {
    PyObject *value = PyObject_GetAttr(self, fp.state[i]);
    if (value == NULL) PyErr_Clear();
    int same = value == expected;
    Py_DecRef(value);
    return same;
}

/* The object's spare list (a new reference) and its length; NULL, no error, if not a list. */
static PyObject *spares_of(PyObject *self, Py_ssize_t *count) {
    PyObject *spares = PyObject_GetAttr(self, fp.state[STATE_SPARES]);
    if (spares == NULL || !PyList_Check(spares)) {
        PyErr_Clear();
        Py_DecRef(spares);
        return NULL;
    }
    *count = PyList_Size(spares);
    return spares;
}

/* The live event count plus `delta`, to be stored with count_stored(); NULL with the error
   set. Computed before anything changes, so that what can fail fails first. */
static PyObject *count_plus(PyObject *self, long delta) {
    PyObject *count = PyObject_GetAttr(self, fp.state[STATE_LIVE_EVENTS]);
    PyObject *step = count == NULL ? NULL : PyLong_FromLong(delta);
    PyObject *sum = step == NULL ? NULL : PyNumber_Add(count, step);
    Py_DecRef(step);
    Py_DecRef(count);
    return sum;
}

/* Store a count from count_plus() (the attribute exists: nothing allocates) and drop it. */
static void count_stored(PyObject *self, PyObject *count) {
    if (PyObject_SetAttr(self, fp.state[STATE_LIVE_EVENTS], count) < 0) PyErr_Clear();
    Py_DecRef(count);
}

/* Set `obj`'s slot `i` (its type was checked: a slot's own setter does not fail then). */
static void slot_set(int i, PyObject *obj, PyObject *value) {
    if (fp.set[i](fp.slot[i], obj, value) < 0) PyErr_Clear();
}

/* 1 when the backend's context is usable (its DriverCalls' `lost`, what _context_lost()
   returns, is None), 0 when it is lost, -1 with the error set when it cannot be read. */
static int context_usable(void) {
    PyObject *lost = PyObject_GetAttr(fp.calls, fp.lost);
    if (lost == NULL) return -1;
    int usable = lost == Py_None;
    Py_DecRef(lost);
    return usable;
}

/* A new event wrapper of `self`, as Event(NO_RAW, self) builds it (closed, uncounted, no
   driver handle); NULL with the error set. It allocates, so it comes before the lock. For
   the Python class, whose tp_new is object's, without its Python __init__: object's tp_new
   makes it and __init__'s stores are made here (every slot of an Event is among the
   descriptors). Any other class (a compiled core's native one, whose tp_new runs __init__
   and sets up what the class needs) is called as Python calls it. */
static PyObject *event_built(PyObject *self) {
    if (!fp.plain_event)
        return PyObject_CallFunctionObjArgs(fp.event_type, fp.no_raw, self, NULL);
    PyObject *event = fp.event_new((PyTypeObject *)fp.event_type, fp.no_args, NULL);
    if (event == NULL) return NULL;
    slot_set(SLOT_RAW, event, fp.no_raw);
    slot_set(SLOT_OWNER, event, self);
    slot_set(SLOT_CLOSED, event, Py_True);
    slot_set(SLOT_USERS, event, fp.zero);
    slot_set(SLOT_RECORDED, event, Py_False);
    slot_set(SLOT_SPARE, event, Py_False);
    slot_set(SLOT_REACHED, event, Py_False);
    return event;
}

/*
 * event_record_new(stream): a fence's event from a spare driver event. The wrapper is built
 * first (an allocation may collect garbage, which runs finalizers), then, in one section of
 * the backend's lock as the driverkit method holds it: it is counted and opened, takes the
 * spare (stored in it before the spare leaves the list, with nothing in between), and the
 * capture check and the record follow. A capturing stream puts the spare back and returns
 * None; a failed check or record builds its error, hands the event to record_failed (its
 * driver event goes back to the driver, not to the spares) and raises. Without a spare the
 * driverkit method creates one. No reference that could be the wrapper's last is dropped
 * under the lock: its finalizer is Python code.
 */
static PyObject *fast_event_record_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames) {
    Py_ssize_t count = 0;
    PyObject *spares = NULL;
    if (fp.configured && cfg.configured && kwnames == NULL && nargs == 1 && thread_bound(self) &&
        (PyObject *)Py_TYPE(args[0]) == fp.stream_type && slot_is(SLOT_OWNER, args[0], self))
        spares = spares_of(self, &count);
    Py_DecRef(spares);
    if (count == 0) return hand_over(BY_RECORD_NEW, self, args, nargs, kwnames);
    PyObject *stream = args[0];
    PyObject *event = event_built(self);
    if (event == NULL) return NULL;
    PyObject *lock = lock_taken(self);
    if (lock == NULL) {
        Py_DecRef(event);
        return NULL;
    }
    /* Asked again under the lock: another thread may have closed the stream or taken the
       last spare meanwhile. Then the method refuses, or creates. */
    void *raw_stream = NULL, *raw_event = NULL;
    count = 0;
    spares = spares_of(self, &count);
    PyObject *raw = count > 0 ? PyList_GetItem(spares, count - 1) : NULL; /* borrowed */
    /* The count before (to store back without an allocation if nothing is recorded) and
       after. */
    PyObject *before = raw != NULL ? PyObject_GetAttr(self, fp.state[STATE_LIVE_EVENTS]) : NULL;
    PyObject *counted = before != NULL ? count_plus(self, 1) : NULL;
    if (counted == NULL || !handle_arg(raw, &raw_event) ||
        !own_open(stream, fp.stream_type, self, &raw_stream)) {
        PyErr_Clear();
        Py_DecRef(counted);
        Py_DecRef(before);
        Py_DecRef(spares);
        int released = lock_given_back(lock);
        Py_DecRef(event);
        if (!released) return NULL;
        return hand_over(BY_RECORD_NEW, self, args, nargs, kwnames);
    }
    Py_IncRef(raw);
    count_stored(self, counted);
    slot_set(SLOT_CLOSED, event, Py_False);
    slot_set(SLOT_RAW, event, raw);
    if (PyList_SetSlice(spares, count - 1, count, NULL) < 0) { /* shrinks: no allocation */
        /* The spare is still in the list: the wrapper gives it up, as it was built. */
        slot_set(SLOT_RAW, event, fp.no_raw);
        slot_set(SLOT_CLOSED, event, Py_True);
        count_stored(self, before);
        Py_DecRef(raw);
        Py_DecRef(spares);
        int released = lock_given_back(lock);
        Py_DecRef(event);
        return released ? hand_over(BY_RECORD_NEW, self, args, nargs, kwnames) : NULL;
    }
    int slot = STREAM_IS_CAPTURING, capturing = 0;
    status_t status = cfg.lost;
    if (status == 0) status = CALL(STREAM_IS_CAPTURING, capturing_fn)(raw_stream, &capturing);
    if (status == 0 && capturing == 0) {
        slot = EVENT_RECORD;
        status = CALL(EVENT_RECORD, record_fn)(raw_event, raw_stream);
    }
    int skipped = status == 0 && capturing != 0;
    if (skipped) {
        /* Nothing was recorded: the spare goes back as it was, the wrapper closed and
           uncounted first (its finalizer then releases nothing). */
        if (PyList_Append(spares, raw) == 0) {
            slot_set(SLOT_CLOSED, event, Py_True);
            slot_set(SLOT_USERS, event, fp.released);
            count_stored(self, before);
            before = NULL;
        }
        PyErr_Clear(); /* else the open wrapper keeps it, and its finalizer releases it */
    } else if (status == 0) {
        slot_set(SLOT_RECORDED, event, Py_True);
        slot_set(SLOT_SPARE, event, Py_True);
    }
    Py_DecRef(before);
    Py_DecRef(raw);
    Py_DecRef(spares);
    if (!lock_given_back(lock) || skipped) {
        Py_DecRef(event);
        return PyErr_Occurred() ? NULL : new_ref(Py_None);
    }
    if (status == 0) return event;
    /* The error first: a sticky one marks the context lost, and record_failed then leaves the
       event to the lost context instead of the driver. record_failed runs whatever is raised,
       as driverkit's `except BaseException` does; an error of its own replaces that one. */
    PyObject *error = PyObject_CallFunction(cfg.fail, "Oi", cfg.name[slot], (int)status);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DecRef(error);
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *done = PyObject_CallFunctionObjArgs(fp.record_failed, self, event, NULL);
    if (done != NULL) {
        Py_DecRef(done);
        PyErr_Restore(type, value, traceback);
    } else {
        Py_DecRef(type);
        Py_DecRef(value);
        Py_DecRef(traceback);
    }
    Py_DecRef(event);
    return NULL;
}

/*
 * event_destroy(event): a fence's event seen reached, kept for the next fence. Checked as the
 * driverkit method checks it, then, in one section of the backend's lock: not closed, no call
 * in flight, the object not finalized, room among the spares. Then the driver event joins the
 * spares (first: the one step that can fail), and the wrapper is closed, released and counted
 * gone. Every other destroy is the driverkit method's.
 */
static PyObject *fast_event_destroy(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    PyObject *event = nargs == 1 ? args[0] : NULL;
    if (!fp.configured || kwnames != NULL || event == NULL ||
        (PyObject *)Py_TYPE(event) != fp.event_type || !slot_is(SLOT_OWNER, event, self) ||
        !slot_is(SLOT_SPARE, event, Py_True) || !slot_is(SLOT_REACHED, event, Py_True) ||
        !state_is(self, STATE_FORKED, Py_False))
        return hand_over(BY_DESTROY, self, args, nargs, kwnames);
    int usable = context_usable();
    if (usable < 0) return NULL;
    if (!usable) return hand_over(BY_DESTROY, self, args, nargs, kwnames);
    PyObject *lock = lock_taken(self);
    if (lock == NULL) return NULL;
    Py_ssize_t count = 0;
    PyObject *spares = spares_of(self, &count);
    PyObject *room = spares == NULL ? NULL : PyObject_GetAttr(self, fp.state[STATE_SPARE_EVENTS]);
    PyObject *users = slot_value(SLOT_USERS, event);
    PyObject *raw = slot_value(SLOT_RAW, event);
    PyObject *uncounted = NULL;
    int kept = room != NULL && PyLong_Check(room) && count < PyLong_AsSsize_t(room) &&
               users != NULL && PyLong_Check(users) && PyLong_AsLong(users) == 0 &&
               raw != NULL && slot_is(SLOT_CLOSED, event, Py_False) &&
               state_is(self, STATE_FINALIZED, Py_False) &&
               (uncounted = count_plus(self, -1)) != NULL && PyList_Append(spares, raw) == 0;
    PyErr_Clear();
    if (kept) {
        slot_set(SLOT_CLOSED, event, Py_True);
        slot_set(SLOT_USERS, event, fp.released);
        count_stored(self, uncounted);
    } else {
        Py_DecRef(uncounted);
    }
    Py_DecRef(raw);
    Py_DecRef(users);
    Py_DecRef(room);
    Py_DecRef(spares);
    if (!lock_given_back(lock)) return NULL;
    if (kept) RETURN_NONE;
    return hand_over(BY_DESTROY, self, args, nargs, kwnames);
}

static PyMethodDef fast_path_methods[] = {
    {"event_record_unless_capturing", (PyCFunction)(void (*)(void))fast_record_unless_capturing,
     METH_FASTCALL | METH_KEYWORDS,
     "event_record_unless_capturing(event, stream) -> bool: see eventapi.driverkit"},
    {"event_query", (PyCFunction)(void (*)(void))fast_event_query,
     METH_FASTCALL | METH_KEYWORDS, "event_query(event) -> bool: see eventapi.driverkit"},
    {"event_elapsed_many", (PyCFunction)(void (*)(void))fast_event_elapsed_many,
     METH_FASTCALL | METH_KEYWORDS,
     "event_elapsed_many(starts, ends) -> list[int]: see eventapi.driverkit"},
    {"event_record_new", (PyCFunction)(void (*)(void))fast_event_record_new,
     METH_FASTCALL | METH_KEYWORDS,
     "event_record_new(stream) -> Event | None: see eventapi.driverkit"},
    {"event_destroy", (PyCFunction)(void (*)(void))fast_event_destroy,
     METH_FASTCALL | METH_KEYWORDS, "event_destroy(event): see eventapi.driverkit"},
    {"adopt_stream", (PyCFunction)(void (*)(void))fast_adopt_stream,
     METH_FASTCALL | METH_KEYWORDS, "adopt_stream(stream) -> Stream: see eventapi.driverkit"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot fast_path_slots[] = {
    {Py_tp_doc, "The fast path's common case in C; see _native.c."},
    {Py_tp_methods, fast_path_methods},
    {0, NULL},
};

static PyType_Spec fast_path_spec = {
    "_native.FastPath", 0, 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, fast_path_slots,
};

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
    {"configure_fast_path", (PyCFunction)(void (*)(void))configure_fast_path, METH_FASTCALL,
     "configure_fast_path(*eventapi.driverkit.compiled_fast_path())"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The hot driver calls, made from C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    /* The class is named under its module as imported (eventapi_cuda._native or
       eventapi_hip._native), which one source cannot spell: the spec's name is made here, in
       storage that lives as long as the type, which keeps pointing into it. */
    static char qualified[200];
    const char *module_name = PyModule_GetName(mod);
    if (module_name == NULL ||
        snprintf(qualified, sizeof qualified, "%s.FastPath", module_name) >=
            (int)sizeof qualified) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "_native: a long module name");
        Py_DecRef(mod);
        return NULL;
    }
    fast_path_spec.name = qualified;
    PyObject *fast_path = PyType_FromSpec(&fast_path_spec);
    if (fast_path == NULL || PyModule_AddObject(mod, "FastPath", fast_path) < 0) {
        Py_DecRef(fast_path);
        Py_DecRef(mod);
        return NULL;
    }
    static char lock_name[200];
    snprintf(lock_name, sizeof lock_name, "%s.Lock", module_name); /* shorter than FastPath */
    lock_spec.name = lock_name;
    PyObject *lock = PyType_FromSpec(&lock_spec);
    if (lock == NULL) {
        Py_DecRef(mod);
        return NULL;
    }
    lock_type = (PyTypeObject *)lock; /* kept for the process, and by the module */
    Py_IncRef(lock);
    if (PyModule_AddObject(mod, "Lock", lock) < 0) {
        Py_DecRef(lock);
        Py_DecRef(mod);
        return NULL;
    }
    return mod;
}
