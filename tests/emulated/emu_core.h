/*
 * Emulation core shared by the emulated CUDA and HIP drivers (test support, not shipped).
 *
 * The core implements a device event model on CPU threads: a stream is a worker thread
 * draining a FIFO of operations (record an event, wait for an event, call a host function);
 * an event is stamped with clock_gettime(CLOCK_MONOTONIC) when its stream reaches it. It
 * knows nothing of any driver's names or error numbers: a symbol layer (emu_cuda.c,
 * emu_hip.c) spells the driver's calls, decides which device a call runs on (CUDA: the
 * current context; HIP: the current device) and maps emu_status to the driver's codes.
 *
 * Handles (events, streams, graphs, contexts) are 64-bit values that encode a kind, a slot
 * of a handle table and the slot's generation. They are never valid addresses, so nothing
 * dereferences them: a destroyed, stale, foreign or wrong-kind handle is looked up, found
 * missing and refused with EMU_E_INVALID_HANDLE.
 *
 * Threading: every function here is thread-safe (one process-wide mutex guards the
 * state). Blocking functions (event and stream synchronize, device synchronize) either sleep
 * on a condition variable or spin, as the driver would for that event or device (a spinning
 * wait burns the calling thread's CPU), and never hold the mutex while a host function runs.
 *
 * Two halves:
 *   - emuc_*: the internal interface a symbol layer calls. Hidden visibility, so that when
 *     both libraries are loaded in one process each keeps its own state.
 *   - emu_*: the control API tests call through ctypes. Exported (C ABI) by both libraries;
 *     each library's copy controls that library only. Documented in README.md.
 */
#ifndef EMU_CORE_H
#define EMU_CORE_H

#include <stdint.h>

#define EMU_INTERNAL __attribute__((visibility("hidden")))
#define EMU_EXPORT __attribute__((visibility("default")))

/* The most devices an emulated driver can report. */
#define EMU_MAX_DEVICES 16

/* The stream argument that names the implicit (default) stream of the call's device. */
#define EMU_STREAM_DEFAULT ((uint64_t)0)

/* Outcome of a core call; a symbol layer maps each to its driver's own code. */
typedef enum emu_status {
    EMU_OK = 0,
    EMU_E_INVALID_VALUE,        /* bad argument: NULL out-pointer, unknown flag */
    EMU_E_NOT_INITIALIZED,      /* the driver was not initialized */
    EMU_E_NO_DEVICE,            /* the emulated machine has no device */
    EMU_E_INVALID_DEVICE,       /* device ordinal out of range */
    EMU_E_INVALID_CONTEXT,      /* no (live) current context */
    EMU_E_INVALID_HANDLE,       /* unknown, destroyed, wrong-kind or unusable handle */
    EMU_E_ILLEGAL_STATE,        /* e.g. capture begun twice, ended without a begin */
    EMU_E_NOT_FOUND,            /* unknown symbol */
    EMU_E_NOT_READY,            /* work still pending */
    EMU_E_CAPTURE_UNSUPPORTED,  /* operation not permitted while the stream captures */
    EMU_E_CAPTURE_INVALIDATED,  /* capture was invalidated by an earlier error */
    EMU_E_CAPTURE_WRONG_THREAD, /* capture ended from another thread than began it */
    EMU_E_CAPTURED_EVENT,       /* event last recorded in a capturing stream */
    EMU_E_OUT_OF_MEMORY,        /* the emulator could not allocate or start a thread */
    EMU_E_UNKNOWN,
    EMU_STATUS_COUNT
} emu_status;

/* Stream capture status reported by emuc_stream_is_capturing. */
enum { EMU_CAPTURE_NONE = 0, EMU_CAPTURE_ACTIVE = 1, EMU_CAPTURE_INVALIDATED = 2 };

/* Capture modes (same order and values in CUDA and HIP). */
enum { EMU_CAPTURE_MODE_GLOBAL = 0, EMU_CAPTURE_MODE_THREAD_LOCAL = 1, EMU_CAPTURE_MODE_RELAXED = 2 };

typedef void (*emu_host_fn)(void *user_data);

/* -- calls, counters and fault injection ------------------------------------------------ */

/*
 * Entry hook every driver function calls first with its base name ("cuEventRecord").
 * Counts the call; returns 0, or the driver error code injected with emu_inject_fault,
 * which the driver function then returns before doing anything else.
 */
EMU_INTERNAL int emuc_enter(const char *name);

/* The same for a call site that keeps `*slot` (static, -1 at first): its record's index, found
   by name on the first call and used from then on. `name` must be the same at every call. */
EMU_INTERNAL int emuc_enter_at(int *slot, const char *name);

/* Device count (env EMU_DEVICE_COUNT at first use, default 2; emu_set_device_count). */
EMU_INTERNAL int emuc_device_count(void);

/* The emulated driver version: the value of emu_set_driver_version, or `fallback`. */
EMU_INTERNAL int emuc_driver_version(int fallback);

/*
 * Whether a spinning host wait under the automatic scheduling mode yields its core between
 * looks (see wait_while in emu_core.c): each driver's documented choice, which its library
 * states by defining emu_spin_policy. EMU_SPIN_AUTO_CUDA is CU_CTX_SCHED_AUTO's: yield only
 * while the process holds more contexts than it has logical processors, else spin on the core.
 * EMU_SPIN_YIELD_ALWAYS is what HIP documents for hipDeviceScheduleAuto with no more contexts
 * than processors (the emulated HIP runtime holds no context). EMU_SPIN_YIELD=1 or 0 in the
 * environment overrides either, and the explicit spin and yield modes.
 */
enum { EMU_SPIN_AUTO_CUDA = 0, EMU_SPIN_YIELD_ALWAYS = 1 };
EMU_INTERNAL extern const int emu_spin_policy;

/* -- primary contexts (one per device, reference counted) ------------------------------ */

/* Retain device `dev`'s primary context; its handle (stable across retains) in *out. */
EMU_INTERNAL emu_status emuc_ctx_retain(int dev, uint64_t *out);
/* Drop one reference; EMU_E_INVALID_CONTEXT when none is held. */
EMU_INTERNAL emu_status emuc_ctx_release(int dev);
/*
 * Resolve a context handle to its device. EMU_E_INVALID_CONTEXT for a handle that is not a
 * context or whose primary context has no reference left (released).
 */
EMU_INTERNAL emu_status emuc_ctx_device(uint64_t ctx, int *dev);

/* -- events ---------------------------------------------------------------------------- */

/*
 * `blocking`: the event was created with the blocking-sync flag, so a host thread waiting on
 * it sleeps; without it the wait spins (see wait_while in emu_core.c), as the drivers do.
 */
EMU_INTERNAL emu_status emuc_event_create(int dev, int timing, int blocking, uint64_t *out);
/* The handle is invalid at once; a record still queued completes harmlessly. */
EMU_INTERNAL emu_status emuc_event_destroy(uint64_t ev);
/*
 * Enqueue a record on `stream` (EMU_STREAM_DEFAULT: `dev`'s implicit stream). Into a capturing
 * stream a plain record is a dependency of the graph, never stamped (reads of the event answer
 * EMU_E_CAPTURED_EVENT while the capture goes on, EMU_E_INVALID_VALUE after it ended, until
 * it is recorded again); `external` (CUDA's and HIP's external record flag) makes it an
 * event-record node instead, which leaves the event as it is and records it at each launch of
 * the graph, and is refused (EMU_E_INVALID_VALUE) on a stream that is not capturing.
 */
EMU_INTERNAL emu_status emuc_event_record(uint64_t ev, int dev, uint64_t stream, int external);
EMU_INTERNAL emu_status emuc_event_query(uint64_t ev);
/* Blocks until the event's latest record was reached. */
EMU_INTERNAL emu_status emuc_event_synchronize(uint64_t ev);
/* Milliseconds from start to end; negative readings can be forced (emu_set_negative_elapsed). */
EMU_INTERNAL emu_status emuc_event_elapsed(float *ms, uint64_t start, uint64_t end);

/* -- streams --------------------------------------------------------------------------- */

EMU_INTERNAL emu_status emuc_stream_create(int dev, int non_blocking, uint64_t *out);
/* The handle is invalid at once; queued work still runs, then the worker exits. */
EMU_INTERNAL emu_status emuc_stream_destroy(uint64_t stream);
EMU_INTERNAL emu_status emuc_stream_wait_event(int dev, uint64_t stream, uint64_t ev);
EMU_INTERNAL emu_status emuc_stream_synchronize(int dev, uint64_t stream);
EMU_INTERNAL emu_status emuc_stream_query(int dev, uint64_t stream);
/* The handle of the (primary) context `stream` belongs to. */
EMU_INTERNAL emu_status emuc_stream_ctx(int dev, uint64_t stream, uint64_t *ctx);
EMU_INTERNAL emu_status emuc_stream_is_capturing(int dev, uint64_t stream, int *status);
EMU_INTERNAL emu_status emuc_stream_begin_capture(int dev, uint64_t stream, int mode);
EMU_INTERNAL emu_status emuc_stream_end_capture(int dev, uint64_t stream, uint64_t *graph);
/* Into a capturing stream, a node that each launch of the graph enqueues. */
EMU_INTERNAL emu_status emuc_launch_host_func(int dev, uint64_t stream, emu_host_fn fn,
                                              void *user_data);
/* Block until every stream of `dev` (implicit one included) drained. */
EMU_INTERNAL emu_status emuc_device_synchronize(int dev);
/*
 * The device's scheduling mode for host waits, numbered as CUDA's CU_CTX_SCHED_* and HIP's
 * hipDeviceSchedule* are: EMU_SCHED_BLOCKING_SYNC makes stream, device and every event
 * synchronize on `dev` sleep; the others spin (except on blocking-sync events), pausing on the
 * core (SPIN), yielding it (YIELD) or as the driver's automatic choice does (AUTO, the
 * default). emuc_set_sched refuses any other value with EMU_E_INVALID_VALUE.
 */
enum { EMU_SCHED_AUTO = 0, EMU_SCHED_SPIN = 1, EMU_SCHED_YIELD = 2, EMU_SCHED_BLOCKING_SYNC = 4 };
EMU_INTERNAL emu_status emuc_set_sched(int dev, int mode);
EMU_INTERNAL emu_status emuc_get_sched(int dev, int *mode);

/* -- device memory -------------------------------------------------------------------- */

/*
 * An allocation of `bytes` on device `dev` (host memory, whose address is the device pointer);
 * EMU_E_INVALID_VALUE for 0 bytes. Freed with emuc_mem_free (EMU_E_INVALID_VALUE for a pointer
 * that is not the start of a live allocation); a write still queued keeps it until it ran.
 */
EMU_INTERNAL emu_status emuc_mem_alloc(int dev, uint64_t bytes, uint64_t *ptr);
EMU_INTERNAL emu_status emuc_mem_free(uint64_t ptr);
/*
 * Enqueue a write of the byte `value` over [ptr, ptr + bytes) on `stream`: the range must lie in
 * one live allocation of the stream's device (EMU_E_INVALID_VALUE otherwise). The stream's worker
 * writes it and takes bytes / the memset rate to do so (emu_set_memset_rate); into a capturing
 * stream it is a node each launch of the graph enqueues.
 */
EMU_INTERNAL emu_status emuc_memset(int dev, uint64_t stream, uint64_t ptr, int value,
                                    uint64_t bytes);
/* The L2 cache size every device reports (EMU_L2_CACHE_BYTES, else emu_set_l2_cache_bytes's). */
EMU_INTERNAL long long emuc_l2_cache_bytes(void);

/* -- graphs ---------------------------------------------------------------------------- */

/* A graph holds the nodes a capture took, in order; an executable graph a copy of them. */
EMU_INTERNAL emu_status emuc_graph_destroy(uint64_t graph);
EMU_INTERNAL emu_status emuc_graph_instantiate(uint64_t graph, uint64_t *exec);
EMU_INTERNAL emu_status emuc_graph_exec_destroy(uint64_t exec);
/* Enqueue the executable graph's nodes on `stream`, or add them to its capture. */
EMU_INTERNAL emu_status emuc_graph_launch(uint64_t exec, int dev, uint64_t stream);

/* -- control API (exported by both libraries; see README.md) --------------------------- */

EMU_EXPORT long emu_live_events(void);
EMU_EXPORT long emu_live_streams(void);
/* Graphs from EndCapture and executable graphs, created and not destroyed. */
EMU_EXPORT long emu_live_graphs(void);
EMU_EXPORT long emu_live_contexts(void);
EMU_EXPORT int emu_inject_fault(const char *call_name, int count, int error_code);
EMU_EXPORT void emu_clear_faults(void);
/* The next `count` calls of `call_name` raise signal `signo` on the calling thread as they
   enter, then go on: a signal that arrives while a program is inside that driver call. */
EMU_EXPORT int emu_signal_calls(const char *call_name, int signo, int count);
EMU_EXPORT int emu_set_device_count(int count);
EMU_EXPORT void emu_set_driver_version(int version);
EMU_EXPORT void emu_set_negative_elapsed(int count);
/* Every later driver call (but error names, versions, symbol lookup) returns `code`; 0 ends it. */
EMU_EXPORT void emu_set_sticky_error(int code);
EMU_EXPORT long emu_calls(const char *call_name);
/* How many times a call woke a stream's sleeping worker thread (a record, a wait, a host
 * function enqueued on an idle stream): the host-side cost a real device does not have. */
EMU_EXPORT long emu_worker_wakeups(void);
/* How many times a spinning host wait yielded its core between looks (see emu_spin_policy). */
EMU_EXPORT long emu_spin_yields(void);
/* How many times a spinning host wait looked at what it waits for and found it busy, pausing
 * or yielding between looks; a sleeping wait makes none. */
EMU_EXPORT long emu_spin_looks(void);
/* How many threads are inside a host wait now (a synchronize's wait for the device), spinning
 * or sleeping: a gauge, which emu_reset_counters leaves alone. */
EMU_EXPORT long emu_host_waits(void);
EMU_EXPORT void emu_reset_counters(void);
/* Allocations made and not freed. */
EMU_EXPORT long emu_live_allocations(void);
/* What the devices report as their L2 cache size, in bytes; 0 restores the default. */
EMU_EXPORT void emu_set_l2_cache_bytes(long long bytes);
/* How many bytes a memset writes per microsecond of device time; 0 restores the default. */
EMU_EXPORT void emu_set_memset_rate(long long bytes_per_us);
/*
 * The operation log: with a capacity > 0, every operation a stream completes from now on (a
 * record, a wait, a host function, a memset) is logged in the order they complete, up to that
 * many (earlier entries dropped); 0 stops logging. Each entry: the stream's handle (0 for an
 * implicit stream), the kind (EMU_OP_*), for a record whether its event times (a synchronize's
 * own event does not), when it began and ended on the device clock, and a memset's byte count.
 * emu_op_log_get returns -1 for an entry that is not there.
 */
enum { EMU_OP_RECORD = 1, EMU_OP_WAIT = 2, EMU_OP_HOST = 3, EMU_OP_MEMSET = 4 };
EMU_EXPORT int emu_set_op_log(long capacity);
EMU_EXPORT long emu_op_log_count(void);
EMU_EXPORT int emu_op_log_get(long i, uint64_t *stream, int *kind, int *timing,
                              int64_t *began_ns, int64_t *ended_ns, long long *bytes);

#endif /* EMU_CORE_H */
