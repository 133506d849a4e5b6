/*
 * The handles and hot calls of eventapi's cuda and hip backends: eventapi_cuda._native and
 * eventapi_hip._native are this one file (eventapi-hip links to it). docs/native.md says why C.
 *
 * Three types. Backend is the base class of CudaBackend and HipBackend: its struct holds one
 * device's state (the device, live counts, the spare events of closed fences). Event and
 * Stream are the handles it gives out: the struct holds the driver's handle, the Backend that
 * owns it (a strong reference), its state (open, recorded, reached, a fence's, created here)
 * and the count of calls in flight that released the GIL. The driver's create writes into the
 * struct and a destroy swaps the handle out before the driver call, so no interrupt can come
 * between the driver and the wrapper. A closed, foreign or never-recorded handle is refused by
 * comparisons here, before the driver sees it.
 *
 * The rules, which every function below follows:
 *
 * - The GIL is held across the quick driver calls (create, record, query, elapsed, the capture
 *   check, an event's destroy) and released across those that can wait for the device (an
 *   event wait, a stream synchronize, a stream destroy: HIP's waits for the stream's last
 *   command), where a host function the driver runs needs the GIL.
 * - Checks and the driver call they guard run in one stretch of C that calls no Python API
 *   that can run Python code (no allocation, no callback): another thread or a finalizer can
 *   only run where the GIL is released or Python code runs, and neither happens there. What
 *   allocates (a new wrapper, a result) is made before the checks or after the driver calls.
 * - A call that releases the GIL counts itself on the handle (users) first. A destroy meanwhile
 *   closes and uncounts the handle and leaves the driver handle in it; the last call out
 *   destroys it. So a destroy from another thread during a wait, a query or a collect is safe
 *   by construction: it never reaches the driver while a call of ours uses the handle.
 * - fork(): a child counts the fork (pthread_atfork), and a Backend made before it refuses
 *   every call there and never calls the driver, not even from a finalizer: the parent owns
 *   its handles.
 * - A free-threaded interpreter has no GIL to rely on; the package refuses to import there
 *   (and cannot load this abi3 build). Supporting it would take a critical section per handle
 *   around each check-and-call, and atomic users counts.
 * - The configuration is the process's (the driver library is), so a second interpreter of the
 *   process is refused at import.
 *
 * What it gets from Python (configure()): the drivers' function addresses and names, the codes
 * and flags it needs, the exception types it raises, and callbacks it calls by design: fail
 * (builds a DriverError), adopt (a foreign stream's handle), log (a destroy that failed in a
 * finalizer, a lost device), is_finalizing; and per Backend, on_gone (releases the device's
 * context once the object and all its handles are gone). It reads or writes no attribute of
 * any Python object. No driver header is needed: the prototypes are declared here.
 *
 * Built against the stable ABI of CPython 3.11 (one abi3 build for 3.11 and later), and counts
 * references through Py_IncRef and Py_DecRef, never the headers' macros, which in the headers
 * of 3.12 and early 3.13 treat None, True and False as immortal even for an abi3 build:
 * loaded by 3.11, such a build would free None (tests/test_native_abi.py checks).
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>

#define NEW_REF(obj) (Py_IncRef(obj), (obj))
#define RETURN_NONE return NEW_REF(Py_None)
#define RETURN_BOOL(value) return NEW_REF((value) ? Py_True : Py_False)
#define FASTCALL(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL

typedef int status_t;
typedef status_t (*create_fn)(void **out, unsigned int flags);
typedef status_t (*handle_fn)(void *handle);
typedef status_t (*pair_fn)(void *first, void *second);
typedef status_t (*elapsed_fn)(float *ms, void *start, void *end);
typedef status_t (*capturing_fn)(void *stream, int *capture_status);
typedef status_t (*wait_fn)(void *stream, void *event, unsigned int flags);
typedef status_t (*launch_fn)(void *stream, void (*fn)(void *), void *data);
typedef status_t (*get_fn)(void *out);
typedef status_t (*device_fn)(int ordinal);

/* The driver calls, in the order configure() takes them. CUDA's device is a context (get,
   set, push, pop: cuCtxGetCurrent ...); HIP's an ordinal (get, set: hipGetDevice ...). */
enum {
    EVENT_CREATE, EVENT_DESTROY, EVENT_RECORD, EVENT_QUERY, EVENT_SYNCHRONIZE, EVENT_ELAPSED,
    STREAM_CREATE, STREAM_DESTROY, STREAM_WAIT_EVENT, STREAM_SYNCHRONIZE, STREAM_IS_CAPTURING,
    LAUNCH_HOST_FUNC, DEVICE_GET, DEVICE_SET, CONTEXT_PUSH, CONTEXT_POP, CALL_COUNT
};

#define STATUS_INVALID_HANDLE 400 /* CUDA's and HIP's: a record into another device's stream */
#define SPARES 16                 /* driver events of closed fences a Backend keeps */
#define MAX_SPIN_NS 60000000000LL

static struct {
    int configured, contexts; /* contexts: CUDA's model (a context per device) */
    void *fn[CALL_COUNT];
    PyObject *name[CALL_COUNT];
    PyObject *fail, *adopt, *log, *is_finalizing, *state_error, *capture_error;
    status_t not_ready, lost;
    unsigned int event_flags, stream_flags, sync_event_flags;
    long long spin_ns;
    int64_t interpreter;
} cfg = {.interpreter = -1};

#define CALL(slot, type) ((type)cfg.fn[slot])

static volatile unsigned long forks; /* fork()s this process came through */
static _Thread_local int thread_bound; /* this thread has a current context (CUDA) */
static void count_fork(void) { forks++; }

/* -- the types ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *name;    /* "cuda", "hip": the BACKEND of log lines and messages */
    PyObject *on_gone; /* called once the object is gone (and so every handle of it) */
    void *device;      /* CUDA: the context; HIP: the ordinal */
    int ordinal, switches, ready, lost_logged;
    unsigned long born; /* forks when made */
    long live_events, live_streams;
    int spare_count;
    void *spares[SPARES];
} Backend;

enum { OPEN = 1, RECORDED = 2, REACHED = 4, FENCE = 8, OWNED = 16 };

typedef struct {
    PyObject_HEAD
    void *raw; /* the driver's handle; NULL once released, or never created */
    Backend *owner;
    Py_ssize_t users; /* calls in flight with the GIL released */
    unsigned int flags;
} Handle;

static PyTypeObject *backend_type, *event_type, *stream_type;

#define IS_EVENT(obj) (Py_TYPE((PyObject *)(obj)) == event_type)
#define IS_STREAM(obj) (Py_TYPE((PyObject *)(obj)) == stream_type)
#define FORKED(b) ((b)->born != forks)
/* Another device of the same driver: its events may be waited on, queried and waited for. */
#define SIBLING(b, o) \
    (Py_TYPE((PyObject *)(o)) == Py_TYPE((PyObject *)(b)) && (o)->ordinal != (b)->ordinal)

/* -- errors ---------------------------------------------------------------------------------- */

static int arity(const char *call, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", call, want, nargs);
    return 0;
}

static PyObject *raise_status(int slot, status_t status) {
    PyObject *exc = PyObject_CallFunction(cfg.fail, "Oi", cfg.name[slot], (int)status);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DecRef(exc);
    }
    return NULL;
}

static void *refuse(PyObject *type, const char *format, ...) {
    va_list va;
    va_start(va, format);
    PyObject *text = PyUnicode_FromFormatV(format, va);
    va_end(va);
    if (text != NULL) PyErr_SetObject(type, text);
    Py_DecRef(text);
    return NULL;
}

static void *refuse_closed(Backend *b, const char *call, PyObject *h) {
    return refuse(cfg.state_error,
                  "%U: %s refused %R: it was already destroyed; create a new one (a destroyed "
                  "handle is never passed to the driver)",
                  b->name, call, h);
}

static void *refuse_foreign(Backend *b, const char *call, PyObject *h, int event) {
    const char *what = event ? "an event" : "a stream";
    if ((IS_EVENT(h) || IS_STREAM(h)) && SIBLING(b, ((Handle *)h)->owner))
        return refuse(cfg.state_error,
                      "%U: %s refused %R: it belongs to another device, and %s needs %s of this "
                      "one (%R); across devices only stream_wait_event(stream, event), "
                      "event_wait(event) and event_query(event) take another device's event. "
                      "Make the call on the handle's own backend object",
                      b->name, call, h, call, what, (PyObject *)b);
    return refuse(cfg.state_error,
                  "%U: %s refused %R: not %s of this %U backend object; pass %s created by the "
                  "same backend object (eventapi.backend(...) returns one per device)",
                  b->name, call, h, what, b->name, what);
}

static void *refuse_unrecorded(Backend *b, const char *call, PyObject *h) {
    return refuse(cfg.state_error,
                  "%U: %s refused %R: it was never recorded, so there is nothing to wait for or "
                  "time; call event_record(event, stream) first",
                  b->name, call, h);
}

/* -- entering a call --------------------------------------------------------------------------- */

/* Every call opens with this: a Backend set up, not forked, the driver usable, and the thread
   bound (CUDA: given this device's context if it had none, so a thread that never touched the
   driver can wait on an event recorded elsewhere). 1, or 0 with the error set. */
static int enter(Backend *b, const char *call, int slot) {
    if (!b->ready)
        return refuse(PyExc_RuntimeError, "%s: the backend object was not initialized", call),
               0;
    if (FORKED(b))
        return refuse(cfg.state_error,
                      "%U: %s refused: this backend object was created before fork(), in the "
                      "parent process; it and its handles are not usable in this process. Create "
                      "a new backend object here, or start worker processes with "
                      "multiprocessing's 'spawn' or 'forkserver' method",
                      b->name, call),
               0;
    if (cfg.lost != 0) return raise_status(slot, cfg.lost), 0;
    if (cfg.contexts && !thread_bound) {
        void *current = NULL;
        status_t status = CALL(DEVICE_GET, get_fn)(&current);
        if (status == 0 && current == NULL)
            status = CALL(DEVICE_SET, handle_fn)(b->device);
        if (status != 0) return raise_status(current == NULL ? DEVICE_SET : DEVICE_GET, status), 0;
        thread_bound = 1;
    }
    return 1;
}

/* Make this Backend's device current for a create, as *restore says how to undo; 0 on failure
   with the error set. CUDA pushes the context when another is current; HIP switches device. */
static int device_on(Backend *b, intptr_t *restore) {
    *restore = -1;
    if (cfg.contexts) {
        void *current = NULL;
        status_t status = CALL(DEVICE_GET, get_fn)(&current);
        if (status == 0 && current != b->device) {
            status = CALL(CONTEXT_PUSH, handle_fn)(b->device);
            *restore = 1;
        }
        return status == 0 ? 1 : (raise_status(*restore == 1 ? CONTEXT_PUSH : DEVICE_GET, status), 0);
    }
    if (!b->switches) return 1;
    int current = 0;
    status_t status = CALL(DEVICE_GET, get_fn)(&current);
    if (status == 0 && current != b->ordinal) {
        status = CALL(DEVICE_SET, device_fn)(b->ordinal);
        *restore = current;
    }
    return status == 0 ? 1 : (raise_status(*restore >= 0 ? DEVICE_SET : DEVICE_GET, status), 0);
}

static int device_off(intptr_t restore) {
    status_t status = 0;
    if (restore < 0) return 1;
    if (cfg.contexts) {
        void *popped = NULL;
        status = CALL(CONTEXT_POP, get_fn)(&popped);
    } else {
        status = CALL(DEVICE_SET, device_fn)((int)restore);
    }
    return status == 0 ? 1 : (raise_status(cfg.contexts ? CONTEXT_POP : DEVICE_SET, status), 0);
}

/* `obj` as this Backend's event (or, with siblings, another device's of the same driver),
   open, and recorded when `recorded`; else NULL with the error set. */
static Handle *checked_event(Backend *b, PyObject *obj, const char *call, int recorded,
                             int siblings) {
    if (!IS_EVENT(obj)) return refuse_foreign(b, call, obj, 1);
    Handle *h = (Handle *)obj;
    if (h->owner != b &&
        !(siblings && SIBLING(b, h->owner)))
        return refuse_foreign(b, call, obj, 1);
    if (!(h->flags & OPEN)) return refuse_closed(b, call, obj);
    if (recorded && !(h->flags & RECORDED)) return refuse_unrecorded(b, call, obj);
    return h;
}

/* The driver handle of `obj`, a stream: this Backend's own (*own set, checked open by
   open_stream() once nothing more can run Python) or a foreign one adopt() accepts, which may
   run Python code: so streams are resolved before the checks of the call. */
static int resolve_stream(Backend *b, PyObject *obj, const char *call, Handle **own,
                          void **raw) {
    *own = NULL;
    if (IS_STREAM(obj)) {
        if (((Handle *)obj)->owner != b) return refuse_foreign(b, call, obj, 0), 0;
        *own = (Handle *)obj;
        return 1;
    }
    if (IS_EVENT(obj)) return refuse_foreign(b, call, obj, 0), 0;
    PyObject *handle = PyObject_CallFunctionObjArgs(cfg.adopt, obj, NULL);
    if (handle == NULL) return 0;
    if (handle == Py_None) {
        Py_DecRef(handle);
        return refuse(cfg.state_error,
                      "%U: %s refused %R: not a stream this backend can use; pass one from "
                      "stream_create_non_blocking() or adopt_stream()",
                      b->name, call, obj),
               0;
    }
    *raw = PyLong_AsVoidPtr(handle);
    Py_DecRef(handle);
    return !PyErr_Occurred();
}

static int open_stream(Backend *b, Handle *own, const char *call, void **raw) {
    if (own == NULL) return 1;
    if (!(own->flags & OPEN)) return refuse_closed(b, call, (PyObject *)own), 0;
    *raw = own->raw;
    return 1;
}

/* -- releasing ------------------------------------------------------------------------------- */

static void log_line(int level, PyObject *message) {
    if (message == NULL) {
        PyErr_WriteUnraisable(cfg.log);
        return;
    }
    PyObject *done = PyObject_CallFunction(cfg.log, "iO", level, message);
    if (done == NULL) PyErr_WriteUnraisable(cfg.log);
    Py_DecRef(done);
    Py_DecRef(message);
}

/* Log the error set now as `what` failed, and clear it: for failures nobody's call can raise. */
static void log_failure(Backend *b, const char *what) {
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    log_line(30, PyUnicode_FromFormat("%U: %s failed: %S", b->name, what, error));
    Py_DecRef(type), Py_DecRef(error), Py_DecRef(traceback);
}

/* The driver's part of a destroy, for a handle closed and uncounted: the driver handle is
   swapped out first, then kept as a spare (a fence's event seen reached), or destroyed. Not
   in a forked child (the parent owns it) nor after the device was lost (the driver frees it
   at exit). 1, or 0 with the driver's error set. */
static int release(Handle *h) {
    Backend *b = h->owner;
    void *raw = h->raw;
    h->raw = NULL;
    if (raw == NULL || FORKED(b)) return 1;
    if (cfg.lost != 0) {
        if (!b->lost_logged) {
            b->lost_logged = 1;
            log_line(40, PyUnicode_FromFormat(
                             "%U: %R: the device context is lost; its remaining handles are "
                             "not released one by one, the driver frees them when the process "
                             "exits; restart the process to use the device again",
                             b->name, (PyObject *)b));
        }
        return 1;
    }
    int event = IS_EVENT(h);
    if (event && (h->flags & (FENCE | REACHED)) == (FENCE | REACHED) && b->spare_count < SPARES) {
        b->spares[b->spare_count++] = raw;
        return 1;
    }
    if (!enter(b, event ? "event_destroy" : "stream_destroy", EVENT_DESTROY)) return 0;
    status_t status;
    if (event) {
        status = CALL(EVENT_DESTROY, handle_fn)(raw);
    } else {
        Py_BEGIN_ALLOW_THREADS
        status = CALL(STREAM_DESTROY, handle_fn)(raw);
        Py_END_ALLOW_THREADS
    }
    return status == 0 ? 1 : (raise_status(event ? EVENT_DESTROY : STREAM_DESTROY, status), 0);
}

/* Close and uncount `h`; released now, or by the last call out of the driver. */
static int close_handle(Handle *h) {
    if (!(h->flags & OPEN)) return 1;
    h->flags &= ~OPEN;
    if (IS_EVENT(h)) h->owner->live_events--;
    else h->owner->live_streams--;
    return h->users > 0 ? 1 : release(h);
}

/* A call that released the GIL is out: the last one releases a handle closed meanwhile. A
   failure there belongs to nobody's call, so it is logged. */
static void leave(Handle *h) {
    if (--h->users > 0 || (h->flags & OPEN) || h->raw == NULL) return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (!release(h)) log_failure(h->owner, "a destroy deferred until a wait returned");
    PyErr_Restore(type, value, traceback);
}

static int finalizing(void) {
    PyObject *answer = PyObject_CallNoArgs(cfg.is_finalizing);
    int yes = answer == NULL || PyObject_IsTrue(answer);
    Py_DecRef(answer);
    PyErr_Clear();
    return yes;
}

/* -- Event and Stream ---------------------------------------------------------------------- */

/* A new handle of `b`, closed and uncounted, holding nothing: made before any check. */
static Handle *new_handle(Backend *b, PyTypeObject *type) {
    Handle *h = PyObject_New(Handle, type);
    if (h == NULL) return NULL;
    h->raw = NULL;
    h->owner = (Backend *)NEW_REF((PyObject *)b);
    h->users = 0;
    h->flags = 0;
    return h;
}

/* The safety net for a handle dropped without a destroy: closed, uncounted and released as a
   destroy would, without raising (a failure is logged); nothing at interpreter shutdown. */
static void handle_dealloc(PyObject *self) {
    Handle *h = (Handle *)self;
    PyTypeObject *type = Py_TYPE(self);
    if (h->raw != NULL && (IS_EVENT(h) || (h->flags & OWNED))) { /* never an adopted stream */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (h->flags & OPEN) {
            h->flags &= ~OPEN;
            if (IS_EVENT(h)) h->owner->live_events--;
            else h->owner->live_streams--;
        }
        if (!FORKED(h->owner) && !finalizing() && !release(h))
            log_failure(h->owner, IS_EVENT(h) ? "destroying a dropped event"
                                              : "destroying a dropped stream");
        PyErr_Restore(t, v, tb);
    }
    Py_DecRef((PyObject *)h->owner);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DecRef((PyObject *)type);
}

static PyObject *handle_repr(PyObject *self) {
    Handle *h = (Handle *)self;
    const char *kind = IS_EVENT(h) ? "event" : (h->flags & OWNED) ? "stream" : "adopted stream";
    if (!(h->flags & OPEN)) return PyUnicode_FromFormat("<%U %s closed>", h->owner->name, kind);
    const char *state = !IS_EVENT(h) ? "" : (h->flags & RECORDED) ? " recorded" : " new";
    return PyUnicode_FromFormat("<%U %s %p%s>", h->owner->name, kind, h->raw, state);
}

static PyObject *get_closed(PyObject *self, void *unused) {
    (void)unused;
    RETURN_BOOL(!(((Handle *)self)->flags & OPEN));
}

static PyObject *get_recorded(PyObject *self, void *unused) {
    (void)unused;
    RETURN_BOOL(((Handle *)self)->flags & RECORDED);
}

static PyObject *get_owned(PyObject *self, void *unused) {
    (void)unused;
    RETURN_BOOL(((Handle *)self)->flags & OWNED);
}

static PyObject *get_backend(PyObject *self, void *unused) {
    (void)unused;
    return NEW_REF(((Handle *)self)->owner->name);
}

/* A stream's driver handle as an int, for the framework that launches work on it; refused once
   the stream was destroyed, when it means nothing. */
static PyObject *stream_address(PyObject *self, const char *what) {
    Handle *h = (Handle *)self;
    if (!(h->flags & OPEN))
        return refuse(cfg.state_error,
                      "%R%s refused: the stream was destroyed, so its handle means nothing; use "
                      "a live stream",
                      self, what);
    return PyLong_FromVoidPtr(h->raw);
}

static PyObject *get_raw(PyObject *self, void *unused) {
    (void)unused;
    return stream_address(self, ".raw");
}

static PyObject *cuda_stream(PyObject *self, PyObject *unused) {
    (void)unused;
    PyObject *address = stream_address(self, ".__cuda_stream__()");
    if (address == NULL) return NULL;
    PyObject *pair = Py_BuildValue("(iN)", 0, address);
    return pair;
}

static PyObject *no_copy(PyObject *self, PyObject *unused) {
    (void)unused;
    return refuse(PyExc_TypeError,
                  "%R cannot be copied: a driver handle has exactly one owner; pass the same "
                  "object around instead",
                  self);
}

static PyObject *no_pickle(PyObject *self, PyObject *unused) {
    (void)unused;
    return refuse(PyExc_TypeError,
                  "%R cannot be pickled: a driver handle is valid only in the process that "
                  "created it; create the handle in the process that uses it",
                  self);
}

#define HANDLE_METHODS                                                                        \
    {"__copy__", no_copy, METH_NOARGS, NULL}, {"__deepcopy__", no_copy, METH_O, NULL},         \
        {"__reduce_ex__", no_pickle, METH_O, NULL}, {"__reduce__", no_pickle, METH_NOARGS, NULL}

static PyMethodDef event_methods[] = {HANDLE_METHODS, {NULL, NULL, 0, NULL}};
static PyMethodDef stream_methods[] = {
    HANDLE_METHODS,
    {"__cuda_stream__", cuda_stream, METH_NOARGS,
     "(0, address): the stream for cuda.core, CuPy, PyTorch or Numba to adopt, not own"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef event_getset[] = {
    {"closed", get_closed, NULL, "True once the event was destroyed.", NULL},
    {"recorded", get_recorded, NULL, "True once the event was recorded into a stream.", NULL},
    {"backend", get_backend, NULL, "The name of the backend the event belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef stream_getset[] = {
    {"closed", get_closed, NULL, "True once the stream was destroyed (never, if adopted).", NULL},
    {"owned", get_owned, NULL, "True when this backend created the stream and destroys it.",
     NULL},
    {"raw", get_raw, NULL, "The driver's handle, for the framework that launches work.", NULL},
    {"backend", get_backend, NULL, "The name of the backend the stream belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* -- creating ---------------------------------------------------------------------------------- */

/* A new event or stream of `b`, created by the driver straight into its wrapper on this
   Backend's device, open and counted. */
static PyObject *create(Backend *b, int event, const char *call) {
    Handle *h = new_handle(b, event ? event_type : stream_type);
    if (h == NULL) return NULL;
    int slot = event ? EVENT_CREATE : STREAM_CREATE;
    intptr_t restore;
    if (enter(b, call, slot) && device_on(b, &restore)) {
        status_t status = CALL(slot, create_fn)(&h->raw, event ? cfg.event_flags : cfg.stream_flags);
        if (status == 0) {
            h->flags = event ? OPEN : OPEN | OWNED;
            if (event) b->live_events++;
            else b->live_streams++;
        }
        if (device_off(restore) && status == 0) return (PyObject *)h;
        if (status != 0) raise_status(slot, status);
    }
    Py_DecRef((PyObject *)h); /* one created is destroyed by its dealloc, as a dropped one is */
    return NULL;
}

static PyObject *event_create(PyObject *self, PyObject *unused) {
    (void)unused;
    return create((Backend *)self, 1, "event_create");
}

static PyObject *stream_create_non_blocking(PyObject *self, PyObject *unused) {
    (void)unused;
    return create((Backend *)self, 0, "stream_create_non_blocking");
}

/* The capture check, then the record unless the stream captures: 1 recorded, 0 capturing,
   -1 with the error set. */
static int record_unless_capturing(void *event, void *stream) {
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status), -1;
    if (capturing != 0) return 0; /* active or invalidated: a record would join the graph */
    status = CALL(EVENT_RECORD, pair_fn)(event, stream);
    return status == 0 ? 1 : (raise_status(EVENT_RECORD, status), -1);
}

/* A fence: an event (a spare driver event when there is one) recorded into this Backend's own
   stream, or None when the stream is capturing. A driver event a record failed on goes back
   to the driver. */
static PyObject *event_record_new(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    const char *call = "event_record_new";
    if (!enter(b, call, EVENT_RECORD)) return NULL;
    if (!IS_STREAM(arg) || ((Handle *)arg)->owner != b) return refuse_foreign(b, call, arg, 0);
    Handle *h = new_handle(b, event_type), *s = (Handle *)arg;
    if (h == NULL) return NULL;
    int recorded = -1;
    if (!(s->flags & OPEN)) {
        refuse_closed(b, call, arg);
        goto done;
    }
    if (b->spare_count > 0) {
        h->raw = b->spares[--b->spare_count];
    } else {
        int capturing = 0;
        status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(s->raw, &capturing);
        if (status != 0) {
            raise_status(STREAM_IS_CAPTURING, status);
            goto done;
        }
        if (capturing) {
            recorded = 0;
            goto done;
        }
        intptr_t restore;
        if (!device_on(b, &restore)) goto done;
        status = CALL(EVENT_CREATE, create_fn)(&h->raw, cfg.event_flags);
        if (!device_off(restore) || (status != 0 && !raise_status(EVENT_CREATE, status)))
            goto done;
    }
    h->flags = OPEN; /* counted from here: a failure below destroys it as a destroy would */
    b->live_events++;
    recorded = record_unless_capturing(h->raw, s->raw);
    if (recorded == 1) {
        h->flags |= RECORDED | FENCE;
        return (PyObject *)h;
    }
    if (recorded == 0 && b->spare_count < SPARES) { /* capturing: the spare goes back */
        b->spares[b->spare_count++] = h->raw;
        h->raw = NULL;
    }
    PyObject *type, *value, *traceback; /* the record's error, raised whatever the destroy does */
    PyErr_Fetch(&type, &value, &traceback);
    if (!close_handle(h)) log_failure(b, "destroying an event whose record failed");
    PyErr_Restore(type, value, traceback);
done:
    Py_DecRef((PyObject *)h);
    if (recorded == 0 && !PyErr_Occurred()) RETURN_NONE;
    return NULL;
}

/* -- the protocol's calls -------------------------------------------------------------------- */

static PyObject *event_destroy(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    if (!b->ready) return refuse(PyExc_RuntimeError, "the backend object was not initialized");
    if (!IS_EVENT(arg) || ((Handle *)arg)->owner != b)
        return refuse_foreign(b, "event_destroy", arg, 1);
    if (!close_handle((Handle *)arg)) return NULL;
    RETURN_NONE;
}

static PyObject *stream_destroy(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    if (!b->ready) return refuse(PyExc_RuntimeError, "the backend object was not initialized");
    if (!IS_STREAM(arg) || ((Handle *)arg)->owner != b)
        return refuse_foreign(b, "stream_destroy", arg, 0);
    if (!(((Handle *)arg)->flags & OWNED))
        return refuse(cfg.state_error,
                      "%U: stream_destroy refused %R: eventapi did not create it, so it is not "
                      "eventapi's to destroy; release it through the library that made it",
                      b->name, arg);
    if (!close_handle((Handle *)arg)) return NULL;
    RETURN_NONE;
}

static PyObject *event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "event_record";
    Handle *s;
    void *stream = NULL;
    if (!arity(call, nargs, 2) || !enter(b, call, EVENT_RECORD) ||
        !resolve_stream(b, args[1], call, &s, &stream))
        return NULL;
    Handle *e = checked_event(b, args[0], call, 0, 0);
    if (e == NULL || !open_stream(b, s, call, &stream)) return NULL;
    status_t status = CALL(EVENT_RECORD, pair_fn)(e->raw, stream);
    if (status != 0) return raise_status(EVENT_RECORD, status);
    e->flags = (e->flags | RECORDED) & ~REACHED;
    RETURN_NONE;
}

/* A window's edge: the capture check and the record in one call, on this Backend's own
   handles; True when recorded. */
static PyObject *event_record_unless_capturing(PyObject *self, PyObject *const *args,
                                               Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "event_record_unless_capturing";
    if (!arity(call, nargs, 2) || !enter(b, call, EVENT_RECORD)) return NULL;
    Handle *e = checked_event(b, args[0], call, 0, 0);
    if (e == NULL) return NULL;
    if (!IS_STREAM(args[1]) || ((Handle *)args[1])->owner != b)
        return refuse_foreign(b, call, args[1], 0);
    Handle *s = (Handle *)args[1];
    if (!(s->flags & OPEN)) return refuse_closed(b, call, args[1]);
    int recorded = record_unless_capturing(e->raw, s->raw);
    if (recorded < 0) return NULL;
    if (recorded) e->flags = (e->flags | RECORDED) & ~REACHED;
    RETURN_BOOL(recorded);
}

static PyObject *event_query(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *e = !enter(b, "event_query", EVENT_QUERY) ? NULL
                                                       : checked_event(b, arg, "event_query", 1, 1);
    if (e == NULL) return NULL;
    status_t status = CALL(EVENT_QUERY, handle_fn)(e->raw);
    if (status == 0) e->flags |= REACHED;
    else if (status != cfg.not_ready) return raise_status(EVENT_QUERY, status);
    RETURN_BOOL(status == 0);
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wait as a fence does, the GIL released: query for up to spin_ns (work done or nearly done
   returns as fast as a spin), then block in the event's synchronize, which sleeps for a
   blocking-sync event. *slot names the call a failure came from. */
static status_t wait_event(void *event, int *slot) {
    long long deadline = now_ns() + cfg.spin_ns;
    status_t status;
    *slot = EVENT_QUERY;
    while ((status = CALL(EVENT_QUERY, handle_fn)(event)) == cfg.not_ready) {
        if (now_ns() >= deadline) {
            *slot = EVENT_SYNCHRONIZE;
            return CALL(EVENT_SYNCHRONIZE, handle_fn)(event);
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
    return status;
}

static PyObject *event_wait(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *e = !enter(b, "event_wait", EVENT_SYNCHRONIZE)
                    ? NULL
                    : checked_event(b, arg, "event_wait", 1, 1);
    if (e == NULL) return NULL;
    int slot;
    status_t status;
    e->users++;
    Py_BEGIN_ALLOW_THREADS
    status = wait_event(e->raw, &slot);
    Py_END_ALLOW_THREADS
    if (status == 0) e->flags |= REACHED;
    leave(e);
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

/* Milliseconds as integer nanoseconds, rounded half to even, clamped at 0: the driver's float
   is its integer ticks over a million, and truncating would read 1.5 us one nanosecond low. */
static PyObject *ns_from_ms(float ms) {
    double ns = (double)ms * 1000000.0;
    if (!isfinite(ns) || fabs(ns) > 4611686018427387904.0) /* 2**62 ns: 146 years */
        return refuse(PyExc_ValueError, "the driver read an elapsed time out of range");
    return PyLong_FromLongLong(ns > 0 ? (long long)nearbyint(ns) : 0);
}

static PyObject *event_elapsed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    if (!arity("event_elapsed", nargs, 2) || !enter(b, "event_elapsed", EVENT_ELAPSED))
        return NULL;
    Handle *start = checked_event(b, args[0], "event_elapsed", 1, 0);
    Handle *end = start == NULL ? NULL : checked_event(b, args[1], "event_elapsed", 1, 0);
    if (end == NULL) return NULL;
    float ms = 0.0f;
    status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms, start->raw, end->raw);
    return status == 0 ? ns_from_ms(ms) : raise_status(EVENT_ELAPSED, status);
}

/* A collect: every event checked, then every reading made, then the ints built. */
static PyObject *event_elapsed_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "event_elapsed_many";
    if (!arity(call, nargs, 2) || !enter(b, call, EVENT_ELAPSED)) return NULL;
    PyObject *starts = PySequence_List(args[0]), *ends = PySequence_List(args[1]);
    PyObject *readings = NULL;
    void **raws = NULL;
    float *ms = NULL;
    if (starts == NULL || ends == NULL) goto done;
    Py_ssize_t count = PyList_Size(starts);
    if (PyList_Size(ends) != count) {
        refuse(PyExc_ValueError, "%s: %zd starts but %zd ends", call, count, PyList_Size(ends));
        goto done;
    }
    readings = PyList_New(count);
    raws = PyMem_Malloc(sizeof(void *) * (size_t)(2 * count + 1));
    ms = PyMem_Malloc(sizeof(float) * (size_t)(count + 1));
    if (readings == NULL || raws == NULL || ms == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto fail;
    }
    /* From here to the last reading, nothing runs Python code: the lists are this call's own
       copies, and nothing allocates. */
    for (Py_ssize_t i = 0; i < 2 * count; i++) {
        Handle *e = checked_event(b, PyList_GetItem(i < count ? starts : ends, i % count), call,
                                  1, 0);
        if (e == NULL) goto fail;
        raws[i] = e->raw;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms[i], raws[i], raws[count + i]);
        if (status != 0) {
            raise_status(EVENT_ELAPSED, status);
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *ns = ns_from_ms(ms[i]);
        if (ns == NULL) goto fail;
        PyList_SetItem(readings, i, ns);
    }
    goto done;
fail:
    Py_DecRef(readings);
    readings = NULL;
done:
    PyMem_Free(raws);
    PyMem_Free(ms);
    Py_DecRef(starts);
    Py_DecRef(ends);
    return readings;
}

static PyObject *stream_wait_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "stream_wait_event";
    Handle *s;
    void *stream = NULL;
    if (!arity(call, nargs, 2) || !enter(b, call, STREAM_WAIT_EVENT) ||
        !resolve_stream(b, args[0], call, &s, &stream))
        return NULL;
    Handle *e = checked_event(b, args[1], call, 1, 1);
    if (e == NULL || !open_stream(b, s, call, &stream)) return NULL;
    status_t status = CALL(STREAM_WAIT_EVENT, wait_fn)(stream, e->raw, 0);
    if (status != 0) return raise_status(STREAM_WAIT_EVENT, status);
    RETURN_NONE;
}

static PyObject *stream_is_capturing(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *s;
    void *stream = NULL;
    if (!enter(b, "stream_is_capturing", STREAM_IS_CAPTURING) ||
        !resolve_stream(b, arg, "stream_is_capturing", &s, &stream) ||
        !open_stream(b, s, "stream_is_capturing", &stream))
        return NULL;
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    RETURN_BOOL(capturing != 0);
}

/* Wait until `stream` drained as a fence waits: on a blocking-sync event recorded into it
   (the driver's own synchronize follows the context's scheduling flag, whose default spins a
   core), then the driver's synchronize, which returns at once and reports what it alone
   reports (an earlier asynchronous fault). Alone where the event cannot stand in: a capturing
   stream (it fails there, and invalidates the capture, as the caller expects) and a stream of
   another device (whose record refuses the event). */
static status_t drain(Backend *b, void *stream, int *slot) {
    int capturing = 0;
    void *event = NULL;
    intptr_t restore;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    *slot = STREAM_IS_CAPTURING;
    if (status == 0 && !capturing) {
        if (!device_on(b, &restore)) return -1;
        status = CALL(EVENT_CREATE, create_fn)(&event, cfg.sync_event_flags);
        *slot = EVENT_CREATE;
        if (!device_off(restore)) {
            if (status == 0) CALL(EVENT_DESTROY, handle_fn)(event);
            return -1;
        }
        if (status == 0) {
            status = CALL(EVENT_RECORD, pair_fn)(event, stream);
            *slot = EVENT_RECORD;
            if (status == STATUS_INVALID_HANDLE) status = 0, *slot = -1;
        }
    }
    if (status == 0) {
        Py_BEGIN_ALLOW_THREADS
        if (*slot == EVENT_RECORD) status = wait_event(event, slot);
        if (status == 0) {
            *slot = STREAM_SYNCHRONIZE;
            status = CALL(STREAM_SYNCHRONIZE, handle_fn)(stream);
        }
        Py_END_ALLOW_THREADS
    }
    if (event != NULL) {
        status_t destroyed = CALL(EVENT_DESTROY, handle_fn)(event);
        if (status == 0 && destroyed != 0) status = destroyed, *slot = EVENT_DESTROY;
    }
    return status;
}

static PyObject *stream_synchronize(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *s;
    void *stream = NULL;
    if (!enter(b, "stream_synchronize", STREAM_SYNCHRONIZE) ||
        !resolve_stream(b, arg, "stream_synchronize", &s, &stream) ||
        !open_stream(b, s, "stream_synchronize", &stream))
        return NULL;
    if (s != NULL) s->users++;
    int slot;
    status_t status = drain(b, stream, &slot);
    if (s != NULL) leave(s);
    if (status == -1) return NULL; /* device_on or device_off raised */
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

/* -- beyond the protocol ----------------------------------------------------------------------- */

/* This Backend's own open stream as it is, or a foreign one it can use as a new, unowned,
   uncounted Stream that is never destroyed. */
static PyObject *adopt_stream(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *own;
    void *raw = NULL;
    if (!enter(b, "adopt_stream", STREAM_IS_CAPTURING) ||
        !resolve_stream(b, arg, "adopt_stream", &own, &raw))
        return NULL;
    if (own != NULL) return open_stream(b, own, "adopt_stream", &raw) ? NEW_REF(arg) : NULL;
    Handle *h = new_handle(b, stream_type);
    if (h == NULL) return NULL;
    h->raw = raw;
    h->flags = OPEN; /* never OWNED: close_handle() is never reached for it */
    return (PyObject *)h;
}

/* launch_host_func's enqueue: the capture check and the launch of the trampoline at
   `address` with `key` on `stream`; CaptureError while the stream captures a graph (a host
   function captured into one runs on its first launch only, and never if it is not). */
static PyObject *enqueue_host_func(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "stream_launch_host_func";
    Handle *s;
    void *stream = NULL, *address, *key;
    if (!arity(call, nargs, 3)) return NULL;
    address = PyLong_AsVoidPtr(args[1]);
    key = PyLong_AsVoidPtr(args[2]);
    if (PyErr_Occurred() || !enter(b, call, LAUNCH_HOST_FUNC) ||
        !resolve_stream(b, args[0], call, &s, &stream) || !open_stream(b, s, call, &stream))
        return NULL;
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    if (capturing)
        return refuse(cfg.capture_error,
                      "%U: %s refused on %R: the stream is capturing a graph, where a host "
                      "function would run on the graph's first launch only; launch it after the "
                      "capture ends, or on another stream",
                      b->name, call, args[0]);
    status = CALL(LAUNCH_HOST_FUNC, launch_fn)(stream, (void (*)(void *))address, key);
    if (status != 0) return raise_status(LAUNCH_HOST_FUNC, status);
    RETURN_NONE;
}

static PyObject *live_counts(PyObject *self, PyObject *unused) {
    (void)unused;
    Backend *b = (Backend *)self;
    return Py_BuildValue("(lli)", b->live_events, b->live_streams, b->spare_count);
}

/* -- Backend ---------------------------------------------------------------------------------- */

/* Backend.__init__(name, ordinal, device, on_gone): device is CUDA's context, or for HIP the
   number of visible devices (with one, creates never switch device). */
static int backend_init(PyObject *self, PyObject *args, PyObject *kwds) {
    Backend *b = (Backend *)self;
    PyObject *name, *device, *on_gone;
    int ordinal;
    static char *keywords[] = {"name", "ordinal", "device", "on_gone", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UiOO", keywords, &name, &ordinal, &device,
                                     &on_gone))
        return -1;
    if (b->ready) return refuse(PyExc_RuntimeError, "a backend object is set up once"), -1;
    if (!cfg.configured) return refuse(PyExc_RuntimeError, "_native.configure() was not called"), -1;
    if (cfg.contexts) {
        b->device = PyLong_AsVoidPtr(device);
    } else {
        b->switches = PyLong_AsLong(device) != 1;
        b->device = (void *)(intptr_t)ordinal;
    }
    if (PyErr_Occurred()) return -1;
    b->name = NEW_REF(name);
    b->on_gone = NEW_REF(on_gone);
    b->ordinal = ordinal;
    b->born = forks;
    b->ready = 1;
    return 0;
}

/* The object is gone, so every handle of it is (each holds it): the spares go back to the
   driver, then on_gone() releases what the handles needed. Nothing in a forked child, after the
   device was lost, or at interpreter shutdown (the driver frees it all at exit). */
static void backend_finalize(PyObject *self) {
    Backend *b = (Backend *)self;
    if (!b->ready || FORKED(b)) return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb); /* a finalizer runs beside whatever error is being raised */
    if (finalizing()) {
        PyErr_Restore(t, v, tb);
        return;
    }
    while (cfg.lost == 0 && b->spare_count > 0 && enter(b, "event_destroy", EVENT_DESTROY)) {
        status_t status = CALL(EVENT_DESTROY, handle_fn)(b->spares[--b->spare_count]);
        if (status != 0 && raise_status(EVENT_DESTROY, status) == NULL) break;
    }
    if (PyErr_Occurred()) log_failure(b, "destroying a spare event");
    b->spare_count = 0;
    if (b->on_gone != Py_None) {
        PyObject *done = PyObject_CallNoArgs(b->on_gone);
        if (done == NULL) PyErr_WriteUnraisable(b->on_gone);
        Py_DecRef(done);
    }
    PyErr_Restore(t, v, tb);
}

static void backend_dealloc(PyObject *self) {
    Backend *b = (Backend *)self;
    PyTypeObject *type = Py_TYPE(self);
    Py_DecRef(b->name);
    Py_DecRef(b->on_gone);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DecRef((PyObject *)type);
}

static PyObject *get_device(PyObject *self, void *unused) {
    (void)unused;
    return PyLong_FromLong(((Backend *)self)->ordinal);
}

static PyGetSetDef backend_getset[] = {
    {"device", get_device, NULL, "The device index this backend object was built for.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef backend_methods[] = {
    {"event_create", event_create, METH_NOARGS, "A timing-enabled, blocking-sync event."},
    {"event_destroy", event_destroy, METH_O, "Release an event; a second call is a no-op."},
    {"event_record", FASTCALL(event_record), "Enqueue the event's timestamp on the stream."},
    {"event_wait", event_wait, METH_O, "Block, the GIL released, until the event is reached."},
    {"event_elapsed", FASTCALL(event_elapsed), "Device nanoseconds from start to end, >= 0."},
    {"event_query", event_query, METH_O, "True when the device reached the event."},
    {"stream_wait_event", FASTCALL(stream_wait_event), "The stream waits on the device."},
    {"stream_synchronize", stream_synchronize, METH_O, "Block until the stream drained."},
    {"stream_create_non_blocking", stream_create_non_blocking, METH_NOARGS,
     "A stream that does not synchronize with the legacy default stream."},
    {"stream_destroy", stream_destroy, METH_O, "Release a stream this object created."},
    {"stream_is_capturing", stream_is_capturing, METH_O, "True while capturing a graph."},
    {"adopt_stream", adopt_stream, METH_O, "The backend's own handle for a stream."},
    {"event_record_new", event_record_new, METH_O, "A fence's create and record; None if capturing."},
    {"event_record_unless_capturing", FASTCALL(event_record_unless_capturing),
     "A window's edge: record unless capturing; True when recorded."},
    {"event_elapsed_many", FASTCALL(event_elapsed_many), "Many readings in one call."},
    {"_enqueue_host_func", FASTCALL(enqueue_host_func), "launch_host_func's enqueue."},
    {"_live_counts", live_counts, METH_NOARGS,
     "(events, streams) created and not destroyed, and the spare driver events kept."},
    {NULL, NULL, 0, NULL},
};

/* -- the module ------------------------------------------------------------------------------- */

/* configure(calls, *, contexts, not_ready, event_flags, stream_flags, sync_event_flags,
   spin_ns, fail, adopt, log, is_finalizing, state_error, capture_error): once per process. */
static PyObject *configure(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    PyObject *calls;
    int contexts, not_ready;
    unsigned int flags[3];
    long long spin_ns;
    PyObject *callbacks[6];
    static char *keywords[] = {"calls", "contexts", "not_ready", "event_flags", "stream_flags",
                               "sync_event_flags", "spin_ns", "fail", "adopt", "log",
                               "is_finalizing", "state_error", "capture_error", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!$piIIILOOOOOO", keywords, &PyTuple_Type,
                                     &calls, &contexts, &not_ready, &flags[0], &flags[1],
                                     &flags[2], &spin_ns, &callbacks[0], &callbacks[1],
                                     &callbacks[2], &callbacks[3], &callbacks[4], &callbacks[5]))
        return NULL;
    if (cfg.configured) return refuse(PyExc_RuntimeError, "_native is configured once");
    if (PyTuple_Size(calls) != CALL_COUNT || spin_ns < 0 || spin_ns > MAX_SPIN_NS)
        return refuse(PyExc_ValueError, "configure(): %d (name, address) calls and a spin in "
                                        "[0, 60 s]",
                      CALL_COUNT);
    for (int i = 0; i < CALL_COUNT; i++) {
        PyObject *name, *address;
        if (!PyArg_ParseTuple(PyTuple_GetItem(calls, i), "UO", &name, &address)) return NULL;
        cfg.fn[i] = PyLong_AsVoidPtr(address);
        if (PyErr_Occurred()) return NULL;
        if (cfg.fn[i] == NULL && (contexts || i < CONTEXT_PUSH))
            return refuse(PyExc_ValueError, "configure(): no address for %U", name);
        cfg.name[i] = NEW_REF(name);
    }
    cfg.contexts = contexts;
    cfg.not_ready = not_ready;
    cfg.event_flags = flags[0];
    cfg.stream_flags = flags[1];
    cfg.sync_event_flags = flags[2];
    cfg.spin_ns = spin_ns;
    PyObject **slots[] = {&cfg.fail, &cfg.adopt, &cfg.log, &cfg.is_finalizing,
                          &cfg.state_error, &cfg.capture_error};
    for (int i = 0; i < 6; i++) *slots[i] = NEW_REF(callbacks[i]);
    cfg.configured = 1;
    RETURN_NONE;
}

static PyObject *lose(PyObject *self, PyObject *arg) {
    (void)self;
    int status;
    if (!PyArg_Parse(arg, "i", &status)) return NULL; /* OverflowError beyond a C int */
    if (status == 0) return refuse(PyExc_ValueError, "lose(): 0 is success, not a lost device");
    cfg.lost = status;
    RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Set the driver's calls and what the module needs of Python; once per process."},
    {"lose", lose, METH_O, "Every later call fails with this sticky status, uncalled."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot backend_slots[] = {
    {Py_tp_doc, "The device state a cuda or hip backend object holds; subclassed in Python."},
    {Py_tp_new, PyType_GenericNew}, {Py_tp_init, backend_init},
    {Py_tp_finalize, backend_finalize}, {Py_tp_dealloc, backend_dealloc},
    {Py_tp_methods, backend_methods}, {Py_tp_getset, backend_getset}, {0, NULL},
};
static PyType_Slot event_slots[] = {
    {Py_tp_doc, "An event a backend object gave out. Users receive it; they never build one."},
    {Py_tp_dealloc, handle_dealloc}, {Py_tp_repr, handle_repr},
    {Py_tp_methods, event_methods}, {Py_tp_getset, event_getset}, {0, NULL},
};
static PyType_Slot stream_slots[] = {
    {Py_tp_doc, "A stream a backend object gave out or adopted. Users never build one."},
    {Py_tp_dealloc, handle_dealloc}, {Py_tp_repr, handle_repr},
    {Py_tp_methods, stream_methods}, {Py_tp_getset, stream_getset}, {0, NULL},
};

/* Each type is named under the module as imported (eventapi_cuda._native, eventapi_hip._native),
   which one source cannot spell: the names are made at import, in storage the types keep. */
static char type_names[3][128];

static int add_type(PyObject *mod, int i, const char *name, PyType_Slot *slots,
                    Py_ssize_t size, unsigned int flags, PyTypeObject **type) {
    if (*type == NULL) { /* made once: a module imported again shares them */
        PyType_Spec spec = {type_names[i], (int)size, 0, Py_TPFLAGS_DEFAULT | flags, slots};
        PyOS_snprintf(type_names[i], sizeof type_names[i], "%s.%s", PyModule_GetName(mod), name);
        *type = (PyTypeObject *)PyType_FromSpec(&spec); /* kept for the process */
    }
    return *type != NULL && PyModule_AddObjectRef(mod, name, (PyObject *)*type) == 0;
}

static int module_exec(PyObject *mod) {
    int64_t interpreter = PyInterpreterState_GetID(PyInterpreterState_Get());
    if (cfg.interpreter >= 0 && cfg.interpreter != interpreter) {
        PyErr_Format(PyExc_ImportError,
                     "%s cannot be imported in a second interpreter of this process: it holds "
                     "the driver's state for the first one (interpreter %lld)",
                     PyModule_GetName(mod), (long long)cfg.interpreter);
        return -1;
    }
    if (!add_type(mod, 0, "Backend", backend_slots, sizeof(Backend), Py_TPFLAGS_BASETYPE,
                  &backend_type) ||
        !add_type(mod, 1, "Event", event_slots, sizeof(Handle), 0, &event_type) ||
        !add_type(mod, 2, "Stream", stream_slots, sizeof(Handle), 0, &stream_type))
        return -1;
    if (cfg.interpreter < 0 && pthread_atfork(NULL, NULL, count_fork) != 0) {
        PyErr_SetString(PyExc_ImportError, "_native: pthread_atfork failed");
        return -1;
    }
    cfg.interpreter = interpreter;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The handles and hot calls of a cuda or hip backend.", 0,
    module_methods, module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&module); }
