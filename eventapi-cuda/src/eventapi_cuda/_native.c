/*
 * The handles and hot calls of eventapi's cuda and hip backends: eventapi_cuda._native and
 * eventapi_hip._native are this one file (docs/native.md says why C, and more of what follows).
 *
 * Backend, the base of CudaBackend and HipBackend, holds one device's state. Event and Stream,
 * the handles it gives out, hold the driver's handle, their Backend (a strong reference), their
 * state and the count of calls in flight that released the GIL. The driver's create writes into
 * the struct and a destroy swaps the handle out before the driver call: no interrupt comes
 * between the driver and the wrapper. Closed, foreign and unrecorded handles are refused here.
 *
 * The rules every function keeps:
 * - The GIL is held across the quick driver calls and released across those that can wait for
 *   the device (an event wait, a stream synchronize, a stream destroy: HIP's waits for the
 *   stream's last command), where a host function the driver runs needs it.
 * - A check and the driver call it guards run in one stretch of C that calls no Python API able
 *   to run Python code (no allocation, no callback), so no other thread, finalizer or signal
 *   handler runs between them. What allocates comes before the checks or after the calls.
 * - A call that releases the GIL counts itself on the handle first (users); a destroy meanwhile
 *   closes and uncounts it, and the last call out destroys it. So a destroy from another thread
 *   during a wait never reaches the driver under it: no lock is needed, and none is taken.
 * - After fork() the child counts the fork, and a Backend made before it refuses every call
 *   there and never calls the driver: the parent owns its handles.
 * - A free-threaded CPython is refused at import (nor can it load an abi3 build): it would take
 *   a critical section per handle around each check-and-call, and atomic users counts.
 * - The configuration is the process's, as the driver is: a second interpreter is refused.
 * From Python it gets the driver's function addresses and names, codes, flags, exception types,
 * and callbacks called by design (fail, adopt, log, is_finalizing; per Backend, on_gone). It
 * reads or writes no attribute of a Python object. References are counted through Py_IncRef
 * and Py_DecRef only: the macros of 3.12's headers free None when an abi3 build runs on 3.11.
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

/* The driver calls, in configure()'s order. CUDA's device is a context (cuCtxGetCurrent,
   cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPopCurrent); HIP's an ordinal (hipGetDevice,
   hipSetDevice). EVENT_RECORD_NODE is cuEventRecordWithFlags / hipEventRecordWithFlags. */
enum {
    EVENT_CREATE, EVENT_DESTROY, EVENT_RECORD, EVENT_QUERY, EVENT_SYNCHRONIZE, EVENT_ELAPSED,
    STREAM_CREATE, STREAM_DESTROY, STREAM_WAIT_EVENT, STREAM_SYNCHRONIZE, STREAM_IS_CAPTURING,
    LAUNCH_HOST_FUNC, EVENT_RECORD_NODE, DEVICE_GET, DEVICE_SET, CONTEXT_PUSH, CONTEXT_POP,
    CALL_COUNT
};

#define STATUS_INVALID_HANDLE 400 /* CUDA's and HIP's: a record into another device's stream */
#define RECORD_EXTERNAL 1 /* CU_EVENT_RECORD_EXTERNAL, hipEventRecordExternal */
#define SPARES 16                 /* driver events of closed fences a Backend keeps */
#define MAX_SPIN_NS 60000000000LL

static struct {
    int configured, contexts; /* contexts: CUDA's model, a context per device */
    void *fn[CALL_COUNT];
    PyObject *name[CALL_COUNT];
    PyObject *fail, *adopt, *log, *is_finalizing, *state_error, *capture_error;
    status_t not_ready, lost;
    unsigned int event_flags, stream_flags, sync_event_flags;
    long long spin_ns;
    int64_t interpreter;
} cfg = {.interpreter = -1};

#define CALL(slot, type) ((type)cfg.fn[slot])

static volatile unsigned long forks;    /* fork()s this process came through */
static _Thread_local int thread_bound;  /* this thread has a current context (CUDA) */
static void count_fork(void) { forks++; }

typedef struct {
    PyObject_HEAD
    PyObject *name;    /* "cuda", "hip": the BACKEND of messages */
    PyObject *on_gone; /* called once the object, and so every handle of it, is gone */
    void *device;      /* CUDA: the context */
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

/* -- errors and logs ------------------------------------------------------------------------ */

static int arity(const char *call, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", call, want, nargs);
    return 0;
}

static PyObject *raise_status(int slot, status_t status) {
    PyObject *exc = PyObject_CallFunction(cfg.fail, "Oi", cfg.name[slot], (int)status);
    if (exc != NULL) PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DecRef(exc);
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
    return refuse(cfg.state_error, "%U: %s refused %R: it was already destroyed; create a new "
                  "one (a destroyed handle is never passed to the driver)", b->name, call, h);
}

static void *refuse_foreign(Backend *b, const char *call, PyObject *h, int event) {
    const char *what = event ? "an event" : "a stream";
    if ((IS_EVENT(h) || IS_STREAM(h)) && SIBLING(b, ((Handle *)h)->owner))
        return refuse(cfg.state_error, "%U: %s refused %R: it belongs to another device, and %s "
                      "needs %s of this one (%R); across devices only stream_wait_event(stream, "
                      "event), event_wait(event) and event_query(event) take another device's "
                      "event. Make the call on the handle's own backend object",
                      b->name, call, h, call, what, (PyObject *)b);
    return refuse(cfg.state_error, "%U: %s refused %R: not %s of this %U backend object; pass %s "
                  "created by the same backend object (eventapi.backend(...) returns one per "
                  "device)", b->name, call, h, what, b->name, what);
}

static void log_line(int level, PyObject *message) {
    PyObject *done = message == NULL ? NULL : PyObject_CallFunction(cfg.log, "iO", level, message);
    if (done == NULL) PyErr_WriteUnraisable(cfg.log);
    Py_DecRef(done);
    Py_DecRef(message);
}

/* Log the error set now as `what` failed, and clear it: a failure nobody's call can raise. */
static void log_failure(Backend *b, const char *what) {
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    log_line(30, PyUnicode_FromFormat("%U: %s failed: %S", b->name, what, error));
    Py_DecRef(type), Py_DecRef(error), Py_DecRef(traceback);
}

static int finalizing(void) {
    PyObject *answer = PyObject_CallNoArgs(cfg.is_finalizing);
    int yes = answer == NULL || PyObject_IsTrue(answer);
    Py_DecRef(answer);
    PyErr_Clear();
    return yes;
}

/* -- entering a call -------------------------------------------------------------------------- */

/* Every call opens with this: a Backend set up, not forked, the driver usable, and the thread
   bound (CUDA: given this device's context if it had none, so a thread that never touched the
   driver can wait on an event recorded elsewhere). 1, or 0 with the error set. */
static int enter(Backend *b, const char *call, int slot) {
    if (!b->ready) return refuse(PyExc_RuntimeError, "%s: the backend object was not set up", call), 0;
    if (FORKED(b))
        return refuse(cfg.state_error, "%U: %s refused: this backend object was created before "
                      "fork(), in the parent process; it and its handles are not usable in this "
                      "process. Create a new backend object here, or start worker processes with "
                      "multiprocessing's 'spawn' or 'forkserver' method", b->name, call), 0;
    if (cfg.lost != 0) return raise_status(slot, cfg.lost), 0;
    if (cfg.contexts && !thread_bound) {
        void *current = NULL;
        status_t status = CALL(DEVICE_GET, get_fn)(&current);
        if (status == 0 && current == NULL) status = CALL(DEVICE_SET, handle_fn)(b->device);
        if (status != 0) return raise_status(current == NULL ? DEVICE_SET : DEVICE_GET, status), 0;
        thread_bound = 1;
    }
    return 1;
}

/* Make this Backend's device current, as *restore says how to undo (device_off); 0 with the
   error set. CUDA pushes the context where another is current; HIP switches device. */
static int device_on(Backend *b, intptr_t *restore) {
    status_t status = 0;
    *restore = -1;
    if (cfg.contexts) {
        void *current = NULL;
        status = CALL(DEVICE_GET, get_fn)(&current);
        if (status == 0 && current != b->device) {
            *restore = 1;
            status = CALL(CONTEXT_PUSH, handle_fn)(b->device);
        }
    } else if (b->switches) {
        int current = 0;
        status = CALL(DEVICE_GET, get_fn)(&current);
        if (status == 0 && current != b->ordinal) {
            *restore = current;
            status = CALL(DEVICE_SET, device_fn)(b->ordinal);
        }
    }
    if (status == 0) return 1;
    int slot = *restore < 0 ? DEVICE_GET : cfg.contexts ? CONTEXT_PUSH : DEVICE_SET;
    *restore = -1;
    return raise_status(slot, status), 0;
}

static int device_off(intptr_t restore) {
    void *popped;
    if (restore < 0) return 1;
    status_t status = cfg.contexts ? CALL(CONTEXT_POP, get_fn)(&popped)
                                   : CALL(DEVICE_SET, device_fn)((int)restore);
    return status == 0 ? 1 : (raise_status(cfg.contexts ? CONTEXT_POP : DEVICE_SET, status), 0);
}

/* `obj` as this Backend's event (or, with siblings, another device's of the same driver),
   open, and recorded when `recorded`; else NULL with the error set. */
static Handle *checked_event(Backend *b, PyObject *obj, const char *call, int recorded,
                             int siblings) {
    Handle *h = (Handle *)obj;
    if (!IS_EVENT(obj) || (h->owner != b && !(siblings && SIBLING(b, h->owner))))
        return refuse_foreign(b, call, obj, 1);
    if (!(h->flags & OPEN)) return refuse_closed(b, call, obj);
    if (recorded && !(h->flags & RECORDED))
        return refuse(cfg.state_error, "%U: %s refused %R: it was never recorded, so there is "
                      "nothing to wait for or time; call event_record(event, stream) first",
                      b->name, call, obj);
    return h;
}

/* A stream: this Backend's own (*own, checked open by open_stream() once nothing more can run
   Python) or the driver handle *raw of a foreign one adopt() accepts, which runs Python code:
   so a call resolves its stream before its other checks. */
static int resolve_stream(Backend *b, PyObject *obj, const char *call, Handle **own,
                          void **raw) {
    *own = NULL;
    if (IS_STREAM(obj) && ((Handle *)obj)->owner == b) return *own = (Handle *)obj, 1;
    if (IS_STREAM(obj) || IS_EVENT(obj)) return refuse_foreign(b, call, obj, 0), 0;
    PyObject *handle = PyObject_CallFunctionObjArgs(cfg.adopt, obj, NULL);
    if (handle == Py_None)
        refuse(cfg.state_error, "%U: %s refused %R: not a stream this backend can use; pass one "
               "from stream_create_non_blocking() or adopt_stream()", b->name, call, obj);
    else if (handle != NULL)
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

/* -- releasing ---------------------------------------------------------------------------------- */

/* The driver's part of a destroy, for a handle closed and uncounted: the driver handle is swapped
   out first, then kept as a spare (a fence's event seen reached), or destroyed. Not in a forked
   child (the parent owns it) nor after the device was lost (the driver frees it at exit). 1, or
   0 with the driver's error set. */
static int release(Handle *h) {
    Backend *b = h->owner;
    void *raw = h->raw;
    int event = IS_EVENT(h);
    h->raw = NULL;
    if (raw == NULL || FORKED(b)) return 1;
    if (cfg.lost != 0) {
        if (!b->lost_logged && (b->lost_logged = 1))
            log_line(40, PyUnicode_FromFormat("%U: %R: the device context is lost; its remaining "
                     "handles are not released one by one, the driver frees them when the process "
                     "exits; restart the process to use the device again", b->name, (PyObject *)b));
        return 1;
    }
    if (event && (h->flags & (FENCE | REACHED)) == (FENCE | REACHED) && b->spare_count < SPARES) {
        b->spares[b->spare_count++] = raw;
        return 1;
    }
    if (!enter(b, event ? "event_destroy" : "stream_destroy", EVENT_DESTROY)) {
        h->raw = raw; /* kept: the object's dealloc tries again, maybe on a thread that can */
        return 0;
    }
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

/* A call that released the GIL is out: the last one releases a handle closed meanwhile, and
   logs a failure there, which belongs to nobody's call. */
static void leave(Handle *h) {
    if (--h->users > 0 || (h->flags & OPEN) || h->raw == NULL) return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (!release(h)) log_failure(h->owner, "a destroy deferred until a wait returned");
    PyErr_Restore(type, value, traceback);
}

/* -- Event and Stream ----------------------------------------------------------------------- */

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
   destroy would, never raising (a failure is logged); nothing at interpreter shutdown. */
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

/* closed, recorded and owned: a flag, given as the getter's closure (closed: not OPEN). */
static PyObject *get_flag(PyObject *self, void *flag) {
    unsigned int flags = ((Handle *)self)->flags, want = (unsigned int)(uintptr_t)flag;
    RETURN_BOOL(want == OPEN ? !(flags & OPEN) : (flags & want) != 0);
}

static PyObject *get_backend(PyObject *self, void *unused) {
    return (void)unused, NEW_REF(((Handle *)self)->owner->name);
}

/* A stream's driver handle, for the framework that launches work on it; refused once the stream
   was destroyed, when it means nothing. */
static PyObject *stream_address(PyObject *self, const char *what) {
    Handle *h = (Handle *)self;
    if (!(h->flags & OPEN))
        return refuse(cfg.state_error, "%R%s refused: the stream was destroyed, so its handle "
                      "means nothing; use a live stream", self, what);
    return PyLong_FromVoidPtr(h->raw);
}

static PyObject *get_raw(PyObject *self, void *unused) {
    return (void)unused, stream_address(self, ".raw");
}

static PyObject *cuda_stream(PyObject *self, PyObject *unused) {
    PyObject *address = stream_address(self, ".__cuda_stream__()");
    return (void)unused, address == NULL ? NULL : Py_BuildValue("(iN)", 0, address);
}

static PyObject *no_copy(PyObject *self, PyObject *unused) {
    return (void)unused, refuse(PyExc_TypeError, "%R cannot be copied: a driver handle has exactly one owner; "
                  "pass the same object around instead", self);
}

static PyObject *no_pickle(PyObject *self, PyObject *unused) {
    return (void)unused, refuse(PyExc_TypeError, "%R cannot be pickled: a driver handle is valid only in the "
                  "process that created it; create the handle in the process that uses it", self);
}

#define HANDLE_METHODS                                                                        \
    {"__copy__", no_copy, METH_NOARGS, NULL}, {"__deepcopy__", no_copy, METH_O, NULL},         \
        {"__reduce_ex__", no_pickle, METH_O, NULL}
#define FLAG(name, flag, doc) {name, get_flag, NULL, doc, (void *)(uintptr_t)(flag)}
#define BACKEND_NAME {"backend", get_backend, NULL, "The name of the handle's backend.", NULL}

static PyMethodDef event_methods[] = {HANDLE_METHODS, {NULL, NULL, 0, NULL}};
static PyMethodDef stream_methods[] = {
    HANDLE_METHODS,
    {"__cuda_stream__", cuda_stream, METH_NOARGS,
     "(0, address): the stream for cuda.core, CuPy, PyTorch or Numba to adopt, not own."},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef event_getset[] = {
    FLAG("closed", OPEN, "True once the event was destroyed."),
    FLAG("recorded", RECORDED, "True once the event was recorded into a stream."),
    BACKEND_NAME, {NULL, NULL, NULL, NULL, NULL},
};
static PyGetSetDef stream_getset[] = {
    FLAG("closed", OPEN, "True once the stream was destroyed (never, if adopted)."),
    FLAG("owned", OWNED, "True when this backend created the stream and destroys it."),
    {"raw", get_raw, NULL, "The driver's handle, for the framework that launches work.", NULL},
    BACKEND_NAME, {NULL, NULL, NULL, NULL, NULL},
};

/* -- creating and recording ------------------------------------------------------------------- */

/* A new event or stream of `b`, created by the driver straight into its wrapper, on this
   Backend's device, open and counted. */
static PyObject *create(Backend *b, int event, const char *call) {
    Handle *h = new_handle(b, event ? event_type : stream_type);
    int slot = event ? EVENT_CREATE : STREAM_CREATE;
    intptr_t restore;
    if (h != NULL && enter(b, call, slot) && device_on(b, &restore)) {
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
    return (void)unused, create((Backend *)self, 1, "event_create");
}
static PyObject *stream_create_non_blocking(PyObject *self, PyObject *unused) {
    return (void)unused, create((Backend *)self, 0, "stream_create_non_blocking");
}

/* The capture check, then the record unless the stream captures (active or invalidated: a
   record would join the graph): 1 recorded, 0 capturing, -1 with the error set. */
static int record_unless_capturing(void *event, void *stream) {
    int capturing = 0;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status), -1;
    if (capturing != 0) return 0;
    status = CALL(EVENT_RECORD, pair_fn)(event, stream);
    return status == 0 ? 1 : (raise_status(EVENT_RECORD, status), -1);
}

/* A fence: an event (a spare driver event where there is one) recorded into this Backend's own
   stream, or None while the stream captures. A driver event a record failed on goes back to the
   driver, and the record's error is raised whatever its destroy does. */
static PyObject *event_record_new(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    const char *call = "event_record_new";
    if (!enter(b, call, EVENT_RECORD)) return NULL;
    if (!IS_STREAM(arg) || ((Handle *)arg)->owner != b) return refuse_foreign(b, call, arg, 0);
    Handle *h = new_handle(b, event_type), *s = (Handle *)arg;
    int recorded = -1, capturing = 0;
    intptr_t restore;
    if (h == NULL) return NULL;
    if (!(s->flags & OPEN)) {
        refuse_closed(b, call, arg);
    } else if (b->spare_count > 0) {
        h->raw = b->spares[--b->spare_count];
    } else {
        status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(s->raw, &capturing);
        if (status != 0) raise_status(STREAM_IS_CAPTURING, status);
        else if (capturing) recorded = 0;
        else if (device_on(b, &restore)) {
            status = CALL(EVENT_CREATE, create_fn)(&h->raw, cfg.event_flags);
            if (device_off(restore) && status != 0) raise_status(EVENT_CREATE, status);
        }
    }
    if (h->raw != NULL && !PyErr_Occurred()) {
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
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (!close_handle(h)) log_failure(b, "destroying an event whose record failed");
        PyErr_Restore(type, value, traceback);
    }
    Py_DecRef((PyObject *)h);
    if (recorded == 0 && !PyErr_Occurred()) RETURN_NONE;
    return NULL;
}

static PyObject *destroy(PyObject *self, PyObject *arg, int event) {
    Backend *b = (Backend *)self;
    const char *call = event ? "event_destroy" : "stream_destroy";
    if (!b->ready) return refuse(PyExc_RuntimeError, "%s: the backend object was not set up", call);
    if (!(event ? IS_EVENT(arg) : IS_STREAM(arg)) || ((Handle *)arg)->owner != b)
        return refuse_foreign(b, call, arg, event);
    if (!event && !(((Handle *)arg)->flags & OWNED))
        return refuse(cfg.state_error, "%U: stream_destroy refused %R: eventapi did not create "
                      "it, so it is not eventapi's to destroy; release it through the library "
                      "that made it", b->name, arg);
    if (!close_handle((Handle *)arg)) return NULL;
    RETURN_NONE;
}

static PyObject *event_destroy(PyObject *self, PyObject *arg) { return destroy(self, arg, 1); }
static PyObject *stream_destroy(PyObject *self, PyObject *arg) { return destroy(self, arg, 0); }

/* event_record, or with `node` event_record_in_graph: the record as an event-record node of
   the graph the stream is capturing, which each launch of the graph stamps (the driver's
   external record flag); refused on a stream not capturing, where the driver refuses the flag. */
static PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs, int node) {
    Backend *b = (Backend *)self;
    const char *call = node ? "event_record_in_graph" : "event_record";
    int slot = node ? EVENT_RECORD_NODE : EVENT_RECORD, capturing = 0;
    Handle *s, *e;
    void *stream = NULL;
    status_t status = 0;
    if (!arity(call, nargs, 2) || !enter(b, call, slot) ||
        !resolve_stream(b, args[1], call, &s, &stream) ||
        (e = checked_event(b, args[0], call, 0, 0)) == NULL || !open_stream(b, s, call, &stream))
        return NULL;
    if (node && (status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing)) != 0)
        return raise_status(STREAM_IS_CAPTURING, status);
    if (node && !capturing)
        return refuse(cfg.state_error, "%U: %s refused %R: the stream is not capturing a graph; "
                      "record into it with event_record(event, stream)", b->name, call, args[1]);
    status = node ? CALL(slot, wait_fn)(e->raw, stream, RECORD_EXTERNAL)
                  : CALL(slot, pair_fn)(e->raw, stream);
    if (status != 0) return raise_status(slot, status);
    e->flags = (e->flags | RECORDED) & ~REACHED;
    RETURN_NONE;
}

static PyObject *event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return record(self, args, nargs, 0);
}
static PyObject *event_record_in_graph(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return record(self, args, nargs, 1);
}

/* A window's edge: the capture check and the record in one call, on this Backend's own
   handles; True when recorded. */
static PyObject *event_record_unless_capturing(PyObject *self, PyObject *const *args,
                                               Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "event_record_unless_capturing";
    Handle *e, *s = nargs == 2 ? (Handle *)args[1] : NULL;
    if (!arity(call, nargs, 2) || !enter(b, call, EVENT_RECORD) ||
        (e = checked_event(b, args[0], call, 0, 0)) == NULL)
        return NULL;
    if (!IS_STREAM(s) || s->owner != b) return refuse_foreign(b, call, args[1], 0);
    if (!(s->flags & OPEN)) return refuse_closed(b, call, args[1]);
    int recorded = record_unless_capturing(e->raw, s->raw);
    if (recorded < 0) return NULL;
    if (recorded) e->flags = (e->flags | RECORDED) & ~REACHED;
    RETURN_BOOL(recorded);
}

/* -- queries, waits and readings ---------------------------------------------------------- */

static PyObject *event_query(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *e;
    if (!enter(b, "event_query", EVENT_QUERY) ||
        (e = checked_event(b, arg, "event_query", 1, 1)) == NULL)
        return NULL;
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
   returns as fast as a spin), then block in the synchronize of the blocking-sync event, which
   sleeps. *slot names the call a failure came from. */
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
    Handle *e;
    int slot;
    status_t status;
    if (!enter(b, "event_wait", EVENT_SYNCHRONIZE) ||
        (e = checked_event(b, arg, "event_wait", 1, 1)) == NULL)
        return NULL;
    e->users++;
    Py_BEGIN_ALLOW_THREADS
    status = wait_event(e->raw, &slot);
    Py_END_ALLOW_THREADS
    if (status == 0) e->flags |= REACHED;
    leave(e);
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

/* Milliseconds as integer nanoseconds, rounded half to even, clamped at 0: the driver's float is
   its integer ticks over a million, and truncating would read 1.5 us one nanosecond low. */
static PyObject *ns_from_ms(float ms) {
    double ns = (double)ms * 1000000.0;
    if (!isfinite(ns) || fabs(ns) > 4611686018427387904.0) /* 2**62 ns: 146 years */
        return refuse(PyExc_ValueError, "the driver read an elapsed time out of range");
    return PyLong_FromLongLong(ns > 0 ? (long long)nearbyint(ns) : 0);
}

static PyObject *event_elapsed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "event_elapsed";
    Handle *start, *end;
    if (!arity(call, nargs, 2) || !enter(b, call, EVENT_ELAPSED) ||
        (start = checked_event(b, args[0], call, 1, 0)) == NULL ||
        (end = checked_event(b, args[1], call, 1, 0)) == NULL)
        return NULL;
    float ms = 0.0f;
    status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms, start->raw, end->raw);
    return status == 0 ? ns_from_ms(ms) : raise_status(EVENT_ELAPSED, status);
}

/* A collect: the lists copied, every event checked, every reading made, then the ints built. */
static PyObject *event_elapsed_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "event_elapsed_many";
    if (!arity(call, nargs, 2) || !enter(b, call, EVENT_ELAPSED)) return NULL;
    PyObject *starts = PySequence_List(args[0]), *ends = PySequence_List(args[1]);
    PyObject *readings = NULL;
    Py_ssize_t count = starts == NULL || ends == NULL ? -1 : PyList_Size(starts);
    void **raws = NULL;
    float *ms = NULL;
    if (count >= 0 && PyList_Size(ends) != count)
        refuse(PyExc_ValueError, "%s: %zd starts but %zd ends", call, count, PyList_Size(ends));
    else if (count >= 0) {
        readings = PyList_New(count);
        raws = PyMem_Malloc(sizeof(void *) * (size_t)(2 * count + 1));
        ms = PyMem_Malloc(sizeof(float) * (size_t)(count + 1));
        if (raws == NULL || ms == NULL) PyErr_NoMemory();
    }
    /* From here to the last reading nothing runs Python code: the lists are this call's own
       copies, and nothing allocates. */
    for (Py_ssize_t i = 0; readings != NULL && !PyErr_Occurred() && i < 2 * count; i++) {
        Handle *e = checked_event(b, PyList_GetItem(i < count ? starts : ends, i % count), call, 1, 0);
        if (e != NULL) raws[i] = e->raw;
    }
    for (Py_ssize_t i = 0; readings != NULL && !PyErr_Occurred() && i < count; i++) {
        status_t status = CALL(EVENT_ELAPSED, elapsed_fn)(&ms[i], raws[i], raws[count + i]);
        if (status != 0) raise_status(EVENT_ELAPSED, status);
    }
    for (Py_ssize_t i = 0; readings != NULL && !PyErr_Occurred() && i < count; i++) {
        PyObject *ns = ns_from_ms(ms[i]);
        if (ns != NULL) PyList_SetItem(readings, i, ns);
    }
    if (PyErr_Occurred()) {
        Py_DecRef(readings);
        readings = NULL;
    }
    PyMem_Free(raws);
    PyMem_Free(ms);
    Py_DecRef(starts);
    Py_DecRef(ends);
    return readings;
}

static PyObject *stream_wait_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "stream_wait_event";
    Handle *s, *e;
    void *stream = NULL;
    if (!arity(call, nargs, 2) || !enter(b, call, STREAM_WAIT_EVENT) ||
        !resolve_stream(b, args[0], call, &s, &stream) ||
        (e = checked_event(b, args[1], call, 1, 1)) == NULL || !open_stream(b, s, call, &stream))
        return NULL;
    status_t status = CALL(STREAM_WAIT_EVENT, wait_fn)(stream, e->raw, 0);
    if (status != 0) return raise_status(STREAM_WAIT_EVENT, status);
    RETURN_NONE;
}

static PyObject *stream_is_capturing(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    const char *call = "stream_is_capturing";
    Handle *s;
    void *stream = NULL;
    int capturing = 0;
    if (!enter(b, call, STREAM_IS_CAPTURING) || !resolve_stream(b, arg, call, &s, &stream) ||
        !open_stream(b, s, call, &stream))
        return NULL;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    RETURN_BOOL(capturing != 0);
}

/* Wait until `stream` drained, on this Backend's device, as a fence waits: on a blocking-sync
   event recorded into it (the driver's own synchronize follows the context's scheduling flag,
   whose default spins a core), then the driver's synchronize, which returns at once and reports
   what it alone reports (an earlier asynchronous fault). Alone where the event cannot stand
   in: a capturing stream (it fails there, and invalidates the capture, as the caller expects)
   and another device's stream (whose record refuses the event). -1: device_on/off raised. */
static status_t drain(Backend *b, void *stream, int *slot) {
    int capturing = 0;
    void *event = NULL;
    intptr_t restore;
    if (!device_on(b, &restore)) return -1;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    *slot = STREAM_IS_CAPTURING;
    if (status == 0 && !capturing) {
        *slot = EVENT_CREATE;
        status = CALL(EVENT_CREATE, create_fn)(&event, cfg.sync_event_flags);
        if (status == 0) {
            *slot = EVENT_RECORD;
            status = CALL(EVENT_RECORD, pair_fn)(event, stream);
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
    if (!device_off(restore)) return -1;
    return status;
}

static PyObject *stream_synchronize(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    const char *call = "stream_synchronize";
    Handle *s;
    void *stream = NULL;
    int slot;
    if (!enter(b, call, STREAM_SYNCHRONIZE) || !resolve_stream(b, arg, call, &s, &stream) ||
        !open_stream(b, s, call, &stream))
        return NULL;
    if (s != NULL) s->users++;
    status_t status = drain(b, stream, &slot);
    if (s != NULL) leave(s);
    if (status == -1) return NULL;
    if (status != 0) return raise_status(slot, status);
    RETURN_NONE;
}

/* -- beyond the protocol ---------------------------------------------------------------------- */

/* This Backend's own open stream as it is, or a foreign one it can use as a new Stream that is
   not owned, not counted and never destroyed. */
static PyObject *adopt_stream(PyObject *self, PyObject *arg) {
    Backend *b = (Backend *)self;
    Handle *own, *h;
    void *raw = NULL;
    if (!enter(b, "adopt_stream", STREAM_IS_CAPTURING) ||
        !resolve_stream(b, arg, "adopt_stream", &own, &raw))
        return NULL;
    if (own != NULL) return open_stream(b, own, "adopt_stream", &raw) ? NEW_REF(arg) : NULL;
    if ((h = new_handle(b, stream_type)) == NULL) return NULL;
    h->raw = raw;
    h->flags = OPEN;
    return (PyObject *)h;
}

/* launch_host_func's enqueue: the capture check and the launch of the trampoline at `address`
   with `key` on `stream`; CaptureError while the stream captures a graph (a host function
   captured into one runs on its first launch only, and never if it is not). */
static PyObject *enqueue_host_func(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Backend *b = (Backend *)self;
    const char *call = "stream_launch_host_func";
    Handle *s;
    void *stream = NULL, *address = NULL, *key = NULL;
    int capturing = 0;
    if (!arity(call, nargs, 3) || ((address = PyLong_AsVoidPtr(args[1])), PyErr_Occurred()) ||
        ((key = PyLong_AsVoidPtr(args[2])), PyErr_Occurred()) ||
        !enter(b, call, LAUNCH_HOST_FUNC) || !resolve_stream(b, args[0], call, &s, &stream) ||
        !open_stream(b, s, call, &stream))
        return NULL;
    status_t status = CALL(STREAM_IS_CAPTURING, capturing_fn)(stream, &capturing);
    if (status != 0) return raise_status(STREAM_IS_CAPTURING, status);
    if (capturing)
        return refuse(cfg.capture_error, "%U: %s refused on %R: the stream is capturing a graph, "
                      "where a host function would run on the graph's first launch only; launch "
                      "it after the capture ends, or on another stream", b->name, call, args[0]);
    status = CALL(LAUNCH_HOST_FUNC, launch_fn)(stream, (void (*)(void *))address, key);
    if (status != 0) return raise_status(LAUNCH_HOST_FUNC, status);
    RETURN_NONE;
}

static PyObject *live_counts(PyObject *self, PyObject *unused) {
    Backend *b = (Backend *)self;
    return (void)unused, Py_BuildValue("(lli)", b->live_events, b->live_streams, b->spare_count);
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
    if (cfg.contexts) b->device = PyLong_AsVoidPtr(device);
    else b->switches = PyLong_AsLong(device) != 1;
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
    PyObject *t, *v, *tb;
    if (!b->ready || FORKED(b)) return;
    PyErr_Fetch(&t, &v, &tb); /* a finalizer runs beside whatever error is being raised */
    if (!finalizing()) {
        while (cfg.lost == 0 && b->spare_count > 0 && enter(b, "event_destroy", EVENT_DESTROY)) {
            status_t status = CALL(EVENT_DESTROY, handle_fn)(b->spares[--b->spare_count]);
            if (status != 0 && raise_status(EVENT_DESTROY, status) == NULL) break;
        }
        if (PyErr_Occurred()) log_failure(b, "destroying a spare event");
        b->spare_count = 0;
        PyObject *done = b->on_gone == Py_None ? NEW_REF(Py_None) : PyObject_CallNoArgs(b->on_gone);
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
    return (void)unused, PyLong_FromLong(((Backend *)self)->ordinal);
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
    {"event_record_new", event_record_new, METH_O, "A fence's event; None while capturing."},
    {"event_record_unless_capturing", FASTCALL(event_record_unless_capturing),
     "A window's edge: record unless capturing; True when recorded."},
    {"event_elapsed_many", FASTCALL(event_elapsed_many), "Many readings in one call."},
    {"event_record_in_graph", FASTCALL(event_record_in_graph),
     "Record into the graph the stream captures, as a node each launch stamps."},
    {"_enqueue_host_func", FASTCALL(enqueue_host_func), "launch_host_func's enqueue."},
    {"_live_counts", live_counts, METH_NOARGS,
     "(events, streams) created and not destroyed, and the spare driver events kept."},
    {NULL, NULL, 0, NULL},
};

/* -- the module ------------------------------------------------------------------------------- */

/* configure(calls, *, contexts, not_ready, event_flags, stream_flags, sync_event_flags, spin_ns,
   fail, adopt, log, is_finalizing, state_error, capture_error): once per process. */
static PyObject *configure(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    PyObject *calls, *callbacks[6];
    int contexts, not_ready;
    unsigned int flags[3];
    long long spin_ns;
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
                      "[0, 60 s]", CALL_COUNT);
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
    if (*type == NULL) { /* made once: the module imported again shares them */
        PyType_Spec spec = {type_names[i], (int)size, 0, Py_TPFLAGS_DEFAULT | flags, slots};
        PyOS_snprintf(type_names[i], sizeof type_names[i], "%s.%s", PyModule_GetName(mod), name);
        *type = (PyTypeObject *)PyType_FromSpec(&spec); /* kept for the process */
    }
    return *type != NULL && PyModule_AddObjectRef(mod, name, (PyObject *)*type) == 0;
}

static int module_exec(PyObject *mod) {
    int64_t interpreter = PyInterpreterState_GetID(PyInterpreterState_Get());
    if (cfg.interpreter >= 0 && cfg.interpreter != interpreter) {
        PyErr_Format(PyExc_ImportError, "%s cannot be imported in a second interpreter of this "
                     "process: it holds the driver's state for the first one (interpreter %lld)",
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
