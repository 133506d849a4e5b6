/*
 * Emulation core: streams as worker threads, events, graphs, primary contexts, a handle
 * table, call counters and fault injection. See emu_core.h for the contract.
 *
 * One process-wide mutex (g.mu) guards every field below. Workers and blocked callers wait
 * on condition variables tied to it; a worker drops it only while a host function runs.
 *
 * The state of an event is its latest record operation: a reference-counted `op` that the
 * stream's queue, the event and every waiter hold. A wait (host or stream side) holds the
 * record it waits for, so re-recording or destroying the event never strands a waiter and
 * never frees memory a worker still touches.
 */
#define _GNU_SOURCE
#include "emu_core.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* -- handles ---------------------------------------------------------------------------- */

/*
 * handle = TAG | kind << 56 | generation << 24 | slot. TAG sets the top bits, which makes
 * every handle a non-canonical address on x86-64 and aarch64 and keeps it clear of the
 * small sentinel stream values drivers reserve (0, 1, 2).
 */
#define H_TAG 0xE000000000000000ull
#define H_KIND_SHIFT 56
#define H_GEN_SHIFT 24
#define H_GEN_MASK 0xFFFFFFFFull
#define H_SLOT_MASK 0xFFFFFFull

enum kind { K_NONE = 0, K_EVENT = 1, K_STREAM = 2, K_GRAPH = 3, K_CTX = 4, K_EXEC = 5 };

typedef struct slot {
    void *obj;
    uint32_t gen;
    uint8_t kind;
} slot;

/* -- objects ---------------------------------------------------------------------------- */

enum op_type { OP_RECORD = EMU_OP_RECORD, OP_WAIT = EMU_OP_WAIT, OP_HOST = EMU_OP_HOST,
               OP_MEMSET = EMU_OP_MEMSET };

/* Device memory: host memory whose address is the device pointer. Reference counted (the list
 * of live allocations holds one reference, each memset queued another), so a free never pulls
 * memory from under a write still queued. */
typedef struct alloc {
    struct alloc *next; /* the list of live allocations */
    unsigned char *base;
    uint64_t bytes;
    int dev;
    int refs;
} alloc;

typedef struct op {
    struct op *next; /* queue link */
    int refs;
    int type;
    int done;         /* OP_RECORD: the stream reached it */
    int64_t stamp_ns; /* OP_RECORD: the device clock (device_clock_ns) when reached */
    int timing;       /* OP_RECORD: its event was created with timing (for the log) */
    struct op *target; /* OP_WAIT: the record waited for (a reference is held) */
    emu_host_fn fn;    /* OP_HOST */
    void *arg;
    alloc *mem;        /* OP_MEMSET: the allocation written (a reference is held) */
    uint64_t offset;   /* OP_MEMSET: where in it, how many bytes, which value */
    uint64_t bytes;
    int value;
} op;

typedef struct event {
    uint64_t handle;
    int dev;
    int timing;
    int blocking; /* created with the blocking-sync flag: a host wait sleeps */
    int captured;  /* the latest record went into a capturing stream: a node, never stamped */
    long capture_seq; /* ... the capture it went into (see captured_status) */
    op *last_rec;  /* the latest record (a reference is held), NULL if never recorded */
} event;

typedef struct stream {
    uint64_t handle; /* 0 for an implicit stream */
    int refs;        /* table (or device slot) + worker + blocked callers */
    int dev;
    int non_blocking;
    int implicit;
    int destroyed;
    op *head, *tail;
    long pending; /* queued operations not yet finished, the running one included */
    int kicks;    /* bumped (atomically, under g.mu) by kick(): what a polling worker reads */
    int sleeping; /* the worker waits on `work`: kick() must signal it */
    pthread_cond_t work;
    int capture; /* EMU_CAPTURE_* */
    int capture_mode;
    pthread_t capture_thread;
    long capture_seq; /* this capture's number: an event recorded into it names it */
    struct node *capture_ops; /* the graph being captured (see struct graph) */
    long capture_len, capture_cap;
    struct stream *prev, *next; /* every stream whose worker still runs */
} stream;

/*
 * A graph's nodes, in capture order (one stream, so one chain). What a launch does with each:
 * N_RECORD (an external event record) records its event into the launch's stream, so the
 * event is stamped at every launch; N_HOST enqueues its host function; N_MEMSET its write (to
 * an allocation still live: one freed since writes nothing); N_DEPENDENCY (a plain record or a
 * stream wait, which CUDA makes edges of the graph) does nothing.
 */
enum node_type { N_DEPENDENCY = 0, N_RECORD = 1, N_HOST = 2, N_MEMSET = 3 };

typedef struct node {
    int type;
    uint64_t event; /* N_RECORD: the event's handle, looked up at each launch */
    emu_host_fn fn; /* N_HOST */
    void *arg;
    uint64_t ptr;   /* N_MEMSET: the range and value, looked up at each launch */
    uint64_t bytes;
    int value;
} node;

/* A graph (K_GRAPH, from EndCapture) or an executable graph (K_EXEC, from instantiating one):
 * the nodes, owned. */
typedef struct graph {
    uint64_t handle;
    node *ops;
    long len;
} graph;

typedef struct ctx {
    uint64_t handle;
    int refs;
    int dev;
} ctx;

/* One entry of the operation log (emu_set_op_log). */
typedef struct logged_op {
    uint64_t stream;
    int kind;
    int timing;
    int64_t began_ns, ended_ns;
    long long bytes;
} logged_op;

typedef struct callrec {
    char name[64];
    long calls;
    int fault_count;
    int fault_code;
    int signal_count; /* the next calls that raise signo on the calling thread (emu_signal_calls) */
    int signo;
} callrec;

#define MAX_CALL_NAMES 256

static struct {
    pthread_mutex_t mu;
    pthread_cond_t done; /* broadcast whenever an operation finishes */
    long wakeups;        /* sleeping workers woken by kick(): see emu_worker_wakeups */
    slot *slots;
    uint32_t nslots, cap;
    uint32_t *free_slots;
    uint32_t nfree;
    int device_count;
    int driver_version; /* 0: the symbol layer's default */
    int negative_elapsed;
    long live_events, live_streams, live_graphs; /* live_graphs: graphs and executable ones */
    long capture_seqs; /* captures begun, numbering them */
    stream *implicit[EMU_MAX_DEVICES];
    ctx ctxs[EMU_MAX_DEVICES];
    int sched[EMU_MAX_DEVICES]; /* the device's scheduling mode for host waits (EMU_SCHED_*) */
    stream *streams; /* list of running streams */
    int64_t worker_poll_ns; /* EMU_WORKER_POLL_US: how long an idle worker polls; 0 sleeps at once */
    int spin_yield;         /* EMU_SPIN_YIELD: 1 or 0 overrides emu_spin_policy; -1 unset */
    int instant;            /* EMU_INSTANT=1: a record reaching an idle stream completes at once */
    int destroy_waits;      /* EMU_STREAM_DESTROY_WAITS=1: a stream destroy waits for its work */
    long processors;        /* logical processors the process may run on (EMU_SPIN_AUTO_CUDA) */
    long spin_yields;       /* yields made by spinning host waits: see emu_spin_yields */
    long spin_looks;        /* looks made by spinning host waits: see emu_spin_looks */
    long host_waits;        /* threads now in a host wait: see emu_host_waits */
    callrec calls[MAX_CALL_NAMES];
    int ncalls;
    alloc *allocs;            /* live allocations */
    long live_allocs;
    long long l2_bytes;       /* 0: l2_default */
    long long l2_default;     /* EMU_L2_CACHE_BYTES, else DEFAULT_L2_BYTES */
    long long memset_rate;    /* bytes per microsecond; 0: memset_default */
    long long memset_default; /* EMU_MEMSET_BYTES_PER_US, else DEFAULT_MEMSET_RATE */
    logged_op *log;           /* the operation log: a ring of log_cap entries */
    long log_cap, log_count;  /* log_count: entries logged since it was enabled */
} g = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .device_count = 2,
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* 4 MiB of L2, written at 100 bytes a nanosecond (42 us): small and quick for tests, and each a
 * setting (EMU_L2_CACHE_BYTES, EMU_MEMSET_BYTES_PER_US; emu_set_*) for a test that needs more. */
#define DEFAULT_L2_BYTES (4LL << 20)
#define DEFAULT_MEMSET_RATE 100000LL

/* A positive integer from the environment variable `name`, or `fallback`. */
static long long env_positive(const char *name, long long fallback) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return fallback;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    return end != NULL && *end == '\0' && n > 0 ? n : fallback;
}

static void read_env(void) {
    g.l2_default = env_positive("EMU_L2_CACHE_BYTES", DEFAULT_L2_BYTES);
    g.memset_default = env_positive("EMU_MEMSET_BYTES_PER_US", DEFAULT_MEMSET_RATE);
    const char *poll = getenv("EMU_WORKER_POLL_US");
    if (poll != NULL && *poll != '\0') {
        char *end = NULL;
        long us = strtol(poll, &end, 10);
        if (end != NULL && *end == '\0' && us > 0 && us <= 1000000) g.worker_poll_ns = us * 1000;
    }
    const char *instant = getenv("EMU_INSTANT");
    g.instant = instant != NULL && strcmp(instant, "1") == 0;
    /* ROCm's hipStreamDestroy waits for the stream's last command (CUDA's returns at once and
       releases the stream once its work is done): a caller holding what that work needs
       (Python's GIL, for a host function) would never see it return. */
    const char *destroy_waits = getenv("EMU_STREAM_DESTROY_WAITS");
    g.destroy_waits = destroy_waits != NULL && strcmp(destroy_waits, "1") == 0;
    const char *yield = getenv("EMU_SPIN_YIELD");
    g.spin_yield = -1;
    if (yield != NULL && (strcmp(yield, "0") == 0 || strcmp(yield, "1") == 0)) {
        g.spin_yield = yield[0] == '1';
    }
    cpu_set_t allowed;
    g.processors = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed)
                                                                        : sysconf(_SC_NPROCESSORS_ONLN);
    if (g.processors < 1) g.processors = 1;
    const char *v = getenv("EMU_DEVICE_COUNT");
    if (v != NULL && *v != '\0') {
        char *end = NULL;
        long n = strtol(v, &end, 10);
        if (end != NULL && *end == '\0' && n >= 0 && n <= EMU_MAX_DEVICES) {
            g.device_count = (int)n;
        }
    }
}

static void lock(void) {
    pthread_once(&g_once, read_env);
    pthread_mutex_lock(&g.mu);
}

static void unlock(void) { pthread_mutex_unlock(&g.mu); }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* -- the device clock -------------------------------------------------------------------- */

/*
 * A device stamps events with its own oscillator, not the host's clock: it runs at a rate a
 * few parts per million off, and it ticks (about 0.5 us on NVIDIA GPUs, 1 us on AMD ones).
 * The emulated device clock is CLOCK_MONOTONIC scaled by (1 + EMU_CLOCK_PPM * 1e-6) from the
 * library's first stamp, and truncated to a multiple of EMU_CLOCK_RESOLUTION_NS. Both are read
 * once, at the first stamp; unset (or unparsable) they are 0 ppm and 1 ns, the host's clock.
 * Self-contained: it has its own once-flag and state, and no lock (they never change after).
 */
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static double clock_rate_offset;  /* EMU_CLOCK_PPM * 1e-6 */
static int64_t clock_resolution_ns = 1;
static int64_t clock_origin_ns;

static void clock_init(void) {
    const char *v = getenv("EMU_CLOCK_PPM");
    if (v != NULL && *v != '\0') {
        char *end = NULL;
        double ppm = strtod(v, &end);
        if (end != NULL && *end == '\0' && ppm > -1e5 && ppm < 1e5) clock_rate_offset = ppm * 1e-6;
    }
    v = getenv("EMU_CLOCK_RESOLUTION_NS");
    if (v != NULL && *v != '\0') {
        char *end = NULL;
        long long n = strtoll(v, &end, 10);
        if (end != NULL && *end == '\0' && n >= 1 && n <= 1000000000LL) clock_resolution_ns = n;
    }
    clock_origin_ns = now_ns();
}

static int64_t device_clock_ns(void) {
    pthread_once(&clock_once, clock_init);
    int64_t host = now_ns() - clock_origin_ns;
    int64_t device = host + (int64_t)((double)host * clock_rate_offset);
    return device - device % clock_resolution_ns;
}

/* -- handle table (g.mu held) ------------------------------------------------------------ */

static uint64_t table_add(int kind, void *obj) {
    uint32_t i;
    if (g.nfree > 0) {
        i = g.free_slots[--g.nfree];
    } else {
        if (g.nslots == g.cap) {
            uint32_t cap = g.cap ? g.cap * 2 : 256;
            if (cap > H_SLOT_MASK) return 0;
            slot *s = realloc(g.slots, cap * sizeof *s);
            if (s == NULL) return 0;
            uint32_t *f = realloc(g.free_slots, cap * sizeof *f);
            if (f == NULL) {
                g.slots = s;
                return 0;
            }
            g.slots = s;
            g.free_slots = f;
            g.cap = cap;
        }
        i = g.nslots++;
        g.slots[i].gen = 1;
    }
    g.slots[i].obj = obj;
    g.slots[i].kind = (uint8_t)kind;
    return H_TAG | ((uint64_t)kind << H_KIND_SHIFT) |
           (((uint64_t)g.slots[i].gen & H_GEN_MASK) << H_GEN_SHIFT) | i;
}

static slot *table_slot(uint64_t h, int kind) {
    if ((h & 0xF000000000000000ull) != H_TAG) return NULL;
    if ((int)((h >> H_KIND_SHIFT) & 0xF) != kind) return NULL;
    uint64_t i = h & H_SLOT_MASK;
    if (i >= g.nslots) return NULL;
    slot *s = &g.slots[i];
    if (s->obj == NULL || s->kind != kind) return NULL;
    if ((uint64_t)s->gen != ((h >> H_GEN_SHIFT) & H_GEN_MASK)) return NULL;
    return s;
}

static void *table_get(uint64_t h, int kind) {
    slot *s = table_slot(h, kind);
    return s ? s->obj : NULL;
}

/* Remove a live handle of `kind` and return its object, so that the handle is stale from now
 * on; NULL when it is not one (the destroy calls answer INVALID_HANDLE then). */
static void *table_take(uint64_t h, int kind) {
    slot *s = table_slot(h, kind);
    if (s == NULL) return NULL;
    void *obj = s->obj;
    uint32_t i = (uint32_t)(h & H_SLOT_MASK);
    s->obj = NULL;
    s->kind = K_NONE;
    s->gen = (uint32_t)((s->gen + 1) & H_GEN_MASK);
    if (s->gen == 0) s->gen = 1;
    g.free_slots[g.nfree++] = i;
    return obj;
}

/* -- host waits (g.mu held on entry and on return) ------------------------------------- */

/*
 * How a thread waits for the device, as the real drivers do it. A blocking-sync wait sleeps
 * on g.done until the condition changes. A spinning wait (what CUDA and HIP do for an event
 * created without the blocking-sync flag, and for stream and device synchronization unless
 * the device's scheduling flag asks for blocking sync) keeps the thread looking: it drops the
 * lock, then either yields the core or pauses on it, and looks again. The spin mode pauses,
 * the yield mode yields, and the automatic mode (the default) does what the driver documents
 * (emu_spin_policy, see emu_core.h): CUDA's CU_CTX_SCHED_AUTO pauses unless the process holds
 * more contexts than it has logical processors to run on; HIP documents a yield. A yield burns
 * the calling thread's CPU time like a pure spin, but on a machine whose cores are all busy it
 * hands the core to the stream's worker, a thread the emulated device needs and a real one
 * does not. EMU_SPIN_YIELD=1 or 0 forces either, whatever the mode.
 */
typedef int (*busy_fn)(const void *arg);

/* Whether a spinning wait on `dev` yields between looks (g.mu held). */
static int spin_yields(int dev) {
    if (g.spin_yield >= 0) return g.spin_yield;
    if (g.sched[dev] == EMU_SCHED_SPIN) return 0;
    if (g.sched[dev] == EMU_SCHED_YIELD) return 1;
    if (emu_spin_policy == EMU_SPIN_YIELD_ALWAYS) return 1;
    long contexts = 0;
    for (int i = 0; i < EMU_MAX_DEVICES; i++) contexts += g.ctxs[i].refs > 0;
    return contexts > g.processors;
}

/* A spinning waiter's pause between looks: the core stays its own, the lock is left alone. */
static void pause_briefly(void) {
    for (int i = 0; i < 64; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#else
        __asm__ __volatile__("" ::: "memory");
#endif
    }
}

/* Wait on device `dev` while busy(arg); `blocking`: a blocking-sync event's wait. */
static void wait_while(int blocking, int dev, busy_fn busy, const void *arg) {
    g.host_waits++;
    if (blocking || g.sched[dev] == EMU_SCHED_BLOCKING_SYNC) {
        while (busy(arg)) pthread_cond_wait(&g.done, &g.mu);
    } else {
        int yields = spin_yields(dev);
        while (busy(arg)) {
            g.spin_looks++;
            if (yields) g.spin_yields++;
            pthread_mutex_unlock(&g.mu);
            if (yields) sched_yield();
            else pause_briefly();
            pthread_mutex_lock(&g.mu);
        }
    }
    g.host_waits--;
}

static int record_pending(const void *arg) { return !((const struct op *)arg)->done; }

/* -- operations and streams (g.mu held) ------------------------------------------------- */

static void alloc_unref(alloc *a) {
    if (--a->refs > 0) return;
    free(a->base);
    free(a);
}

static void op_unref(op *o) {
    if (--o->refs > 0) return;
    if (o->target != NULL) op_unref(o->target);
    if (o->mem != NULL) alloc_unref(o->mem);
    free(o);
}

/* Log an operation a stream completed, when the log is on (g.mu held). */
static void log_op(const stream *s, const op *o, int64_t began_ns, int64_t ended_ns) {
    if (g.log_cap <= 0) return;
    long long bytes = o->type == OP_MEMSET ? (long long)o->bytes : 0;
    g.log[g.log_count % g.log_cap] =
        (logged_op){s->handle, o->type, o->timing, began_ns, ended_ns, bytes};
    g.log_count++;
}

/* Sleep on the calling thread until CLOCK_MONOTONIC reads `until_ns` (g.mu not held). */
static void sleep_until(int64_t until_ns) {
    struct timespec ts = {(time_t)(until_ns / 1000000000LL), (long)(until_ns % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void stream_unref(stream *s) {
    if (--s->refs > 0) return;
    if (s->prev) s->prev->next = s->next;
    else g.streams = s->next;
    if (s->next) s->next->prev = s->prev;
    pthread_cond_destroy(&s->work);
    free(s);
}

/* Tell the worker its queue or its state changed (g.mu held). */
static void kick(stream *s) {
    __atomic_add_fetch(&s->kicks, 1, __ATOMIC_RELEASE);
    if (s->sleeping) {
        /* Signalled once per sleep: a second kick before the worker runs wakes nobody. */
        s->sleeping = 0;
        g.wakeups++;
        pthread_cond_signal(&s->work);
    }
}

/*
 * With EMU_WORKER_POLL_US set, an idle worker polls its queue that long before it sleeps, as a
 * device polls its command queue: a record then costs the host an enqueue, never a wake-up of
 * another thread (on a small machine, waking the worker can preempt the calling thread on its
 * own core, microseconds a real driver's cuEventRecord does not cost). The poll reads the kick
 * counter without the lock and yields the core between looks. Off by default: it also removes
 * the device's latency, so every call costs a fraction of a real driver's; benchmarks use it
 * to show what a caller's own code costs when the driver costs next to nothing.
 */
static void poll_for_work(stream *s) {
    if (g.worker_poll_ns <= 0) return;
    int seen = __atomic_load_n(&s->kicks, __ATOMIC_ACQUIRE);
    int64_t until = now_ns() + g.worker_poll_ns;
    pthread_mutex_unlock(&g.mu);
    do {
        sched_yield();
    } while (__atomic_load_n(&s->kicks, __ATOMIC_ACQUIRE) == seen && now_ns() < until);
    pthread_mutex_lock(&g.mu);
}

static void *worker(void *arg) {
    stream *s = arg;
    /* A memset's sleep ends within microseconds of its deadline, not the default 50 us slack
     * of a timer on Linux: the work takes the time it is given. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    pthread_mutex_lock(&g.mu);
    for (;;) {
        if (s->head == NULL && !s->destroyed) poll_for_work(s);
        while (s->head == NULL && !s->destroyed) {
            s->sleeping = 1;
            pthread_cond_wait(&s->work, &g.mu);
            s->sleeping = 0;
        }
        if (s->head == NULL) break; /* destroyed and drained */
        op *o = s->head;
        int64_t began = g.log_cap > 0 ? device_clock_ns() : 0;
        switch (o->type) {
        case OP_RECORD:
            o->stamp_ns = device_clock_ns();
            o->done = 1;
            began = o->stamp_ns;
            break;
        case OP_WAIT:
            while (!o->target->done) pthread_cond_wait(&g.done, &g.mu);
            break;
        case OP_HOST:
            /* The host function may call back into the driver: never run it under g.mu. */
            pthread_mutex_unlock(&g.mu);
            o->fn(o->arg);
            pthread_mutex_lock(&g.mu);
            break;
        case OP_MEMSET: {
            /* The device writes at its rate (an instant device at once); the lock is let go
             * meanwhile, as a copy engine runs beside the driver's calls. */
            long long rate = g.memset_rate ? g.memset_rate : g.memset_default;
            int64_t took = g.instant ? 0 : (int64_t)(o->bytes * 1000 / (uint64_t)rate);
            int64_t until = now_ns() + took;
            pthread_mutex_unlock(&g.mu);
            memset(o->mem->base + o->offset, o->value, o->bytes);
            sleep_until(until);
            pthread_mutex_lock(&g.mu);
            break;
        }
        default:
            break;
        }
        if (g.log_cap > 0) log_op(s, o, began, o->type == OP_RECORD ? began : device_clock_ns());
        /* Popped only now, so the stream reads as busy while the operation runs. */
        s->head = o->next;
        if (s->head == NULL) s->tail = NULL;
        s->pending--;
        op_unref(o);
        pthread_cond_broadcast(&g.done);
    }
    stream_unref(s);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static emu_status stream_new(int dev, int non_blocking, int implicit, stream **out) {
    stream *s = calloc(1, sizeof *s);
    if (s == NULL) return EMU_E_OUT_OF_MEMORY;
    s->dev = dev;
    s->non_blocking = non_blocking;
    s->implicit = implicit;
    s->refs = 2; /* the owner (table or device slot) and the worker */
    if (pthread_cond_init(&s->work, NULL) != 0) {
        free(s);
        return EMU_E_OUT_OF_MEMORY;
    }
    /*
     * Workers block every signal, so that signals keep going to the threads of the program
     * (Python handles SIGINT in its main thread), and are detached, so a process may exit
     * with streams alive without joining anything.
     */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, &attr, worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_cond_destroy(&s->work);
        free(s);
        return EMU_E_OUT_OF_MEMORY;
    }
    s->next = g.streams;
    if (g.streams) g.streams->prev = s;
    g.streams = s;
    *out = s;
    return EMU_OK;
}

/* The stream a call names: a live handle, or EMU_STREAM_DEFAULT for dev's implicit one. */
static emu_status stream_resolve(int dev, uint64_t h, stream **out) {
    if (h == EMU_STREAM_DEFAULT) {
        if (dev < 0 || dev >= EMU_MAX_DEVICES) return EMU_E_INVALID_DEVICE;
        if (g.implicit[dev] == NULL) {
            emu_status st = stream_new(dev, 0, 1, &g.implicit[dev]);
            if (st != EMU_OK) return st;
        }
        *out = g.implicit[dev];
        return EMU_OK;
    }
    stream *s = table_get(h, K_STREAM);
    if (s == NULL) return EMU_E_INVALID_HANDLE;
    *out = s;
    return EMU_OK;
}

static void enqueue(stream *s, op *o) {
    o->refs++; /* the queue's reference */
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->pending++;
    kick(s);
}

/* Enqueue a call of `fn(arg)` on `s`, a stream not capturing (g.mu held). */
static emu_status host_on(stream *s, emu_host_fn fn, void *arg) {
    op *o = calloc(1, sizeof *o);
    if (o == NULL) return EMU_E_OUT_OF_MEMORY;
    o->type = OP_HOST;
    o->fn = fn;
    o->arg = arg;
    enqueue(s, o); /* the queue holds the only reference */
    return EMU_OK;
}

static emu_status graph_new(int kind, const node *ops, long len, uint64_t *out);

/* Operations on a capturing stream become graph nodes and do not run. */
static emu_status capture_add(stream *s, int type, uint64_t event, emu_host_fn fn, void *arg) {
    if (s->capture == EMU_CAPTURE_INVALIDATED) return EMU_E_CAPTURE_INVALIDATED;
    if (s->capture_len == s->capture_cap) {
        long cap = s->capture_cap ? s->capture_cap * 2 : 16;
        node *ops = realloc(s->capture_ops, (size_t)cap * sizeof *ops);
        if (ops == NULL) return EMU_E_OUT_OF_MEMORY;
        s->capture_ops = ops;
        s->capture_cap = cap;
    }
    s->capture_ops[s->capture_len++] = (node){type, event, fn, arg, 0, 0, 0};
    return EMU_OK;
}

static emu_status capture_node(stream *s) { return capture_add(s, N_DEPENDENCY, 0, NULL, NULL); }

/* A memset captured: a node whose range each launch looks up again. */
static emu_status capture_memset(stream *s, uint64_t ptr, int value, uint64_t bytes) {
    emu_status st = capture_add(s, N_MEMSET, 0, NULL, NULL);
    if (st == EMU_OK) {
        node *n = &s->capture_ops[s->capture_len - 1];
        n->ptr = ptr;
        n->value = value;
        n->bytes = bytes;
    }
    return st;
}

/* The capture ends or is dropped: the stream captures nothing from here. */
static void capture_clear(stream *s) {
    free(s->capture_ops);
    s->capture_ops = NULL;
    s->capture_len = s->capture_cap = 0;
    s->capture = EMU_CAPTURE_NONE;
}

/*
 * What a read of a captured event (one whose latest record went into a capture) answers:
 * CAPTURED_EVENT while that capture goes on, INVALID_VALUE once it ended ("invalid argument":
 * what CUDA answers for an event a graph recorded without the external flag, which is a
 * dependency inside the graph and never a timestamp). EMU_OK for an event not captured.
 */
static emu_status captured_status(const event *e) {
    if (!e->captured) return EMU_OK;
    for (stream *s = g.streams; s != NULL; s = s->next) {
        if (s->capture != EMU_CAPTURE_NONE && s->capture_seq == e->capture_seq) {
            return EMU_E_CAPTURED_EVENT;
        }
    }
    return EMU_E_INVALID_VALUE;
}

/* -- calls, counters, faults ------------------------------------------------------------ */

/* Base name of a driver function: "cuEventDestroy_v2" counts as "cuEventDestroy". */
static void base_name(const char *in, char out[64]) {
    size_t n = strlen(in);
    if (n > 63) n = 63;
    memcpy(out, in, n);
    out[n] = '\0';
    size_t i = n;
    while (i > 0 && out[i - 1] >= '0' && out[i - 1] <= '9') i--;
    if (i < n && i >= 2 && out[i - 1] == 'v' && out[i - 2] == '_') out[i - 2] = '\0';
}

static callrec *call_find(const char *name, int create) {
    char key[64];
    base_name(name, key);
    for (int i = 0; i < g.ncalls; i++) {
        if (strcmp(g.calls[i].name, key) == 0) return &g.calls[i];
    }
    if (!create || g.ncalls == MAX_CALL_NAMES) return NULL;
    callrec *r = &g.calls[g.ncalls++];
    memset(r, 0, sizeof *r);
    memcpy(r->name, key, sizeof key);
    return r;
}

/* -- sticky errors ---------------------------------------------------------------------
 * A real device that faults (an illegal address in a kernel) poisons its context: every later
 * call of the process, destroys included, returns the same error until the process exits.
 * emu_set_sticky_error(code) models that process-wide; the calls that only describe the
 * driver (error names, the version, symbol lookup) keep working, as they do on a real one.
 * Guarded by g.mu. */

static int g_sticky_error;

static int sticky_error_for(const char *name) {
    if (g_sticky_error == 0) return 0;
    if (strstr(name, "GetError") != NULL || strstr(name, "GetProcAddress") != NULL ||
        strstr(name, "GetVersion") != NULL) {
        return 0;
    }
    return g_sticky_error;
}

void emu_set_sticky_error(int code) {
    lock();
    g_sticky_error = code;
    unlock();
}

int emuc_enter(const char *name) {
    int slot = -1;
    return emuc_enter_at(&slot, name);
}

int emuc_enter_at(int *slot, const char *name) {
    int code = 0;
    lock();
    /* The record is found by name once per call site, then by the index the site keeps (a
       record is never removed): what a call costs does not depend on how many names the
       process called before it, or in which order. */
    callrec *r = *slot >= 0 ? &g.calls[*slot] : call_find(name, 1);
    int signo = 0;
    if (r != NULL) {
        *slot = (int)(r - g.calls);
        r->calls++;
        if (r->fault_count > 0) {
            r->fault_count--;
            code = r->fault_code;
        }
        if (r->signal_count > 0) {
            r->signal_count--;
            signo = r->signo;
        }
    }
    if (code == 0) code = sticky_error_for(name);
    unlock();
    /* The signal arrives while the caller is inside this driver call, which then goes on. */
    if (signo != 0) raise(signo);
    return code;
}

int emuc_device_count(void) {
    lock();
    int n = g.device_count;
    unlock();
    return n;
}

int emuc_driver_version(int fallback) {
    lock();
    int v = g.driver_version ? g.driver_version : fallback;
    unlock();
    return v;
}

/* -- contexts --------------------------------------------------------------------------- */

emu_status emuc_ctx_retain(int dev, uint64_t *out) {
    if (out == NULL) return EMU_E_INVALID_VALUE;
    emu_status st = EMU_OK;
    lock();
    if (dev < 0 || dev >= g.device_count) {
        st = EMU_E_INVALID_DEVICE;
    } else {
        ctx *c = &g.ctxs[dev];
        if (c->handle == 0) {
            /* The primary context keeps its handle for the life of the process. */
            c->dev = dev;
            c->handle = table_add(K_CTX, c);
            if (c->handle == 0) st = EMU_E_OUT_OF_MEMORY;
        }
        if (st == EMU_OK) {
            c->refs++;
            *out = c->handle;
        }
    }
    unlock();
    return st;
}

emu_status emuc_ctx_release(int dev) {
    emu_status st = EMU_OK;
    lock();
    if (dev < 0 || dev >= g.device_count) st = EMU_E_INVALID_DEVICE;
    else if (g.ctxs[dev].refs == 0) st = EMU_E_INVALID_CONTEXT;
    else g.ctxs[dev].refs--;
    unlock();
    return st;
}

emu_status emuc_ctx_device(uint64_t h, int *dev) {
    emu_status st = EMU_OK;
    lock();
    ctx *c = table_get(h, K_CTX);
    if (c == NULL || c->refs == 0 || c->dev >= g.device_count) st = EMU_E_INVALID_CONTEXT;
    else *dev = c->dev;
    unlock();
    return st;
}

/* -- events ----------------------------------------------------------------------------- */

emu_status emuc_event_create(int dev, int timing, int blocking, uint64_t *out) {
    if (out == NULL) return EMU_E_INVALID_VALUE;
    event *e = calloc(1, sizeof *e);
    if (e == NULL) return EMU_E_OUT_OF_MEMORY;
    e->dev = dev;
    e->timing = timing;
    e->blocking = blocking;
    lock();
    e->handle = table_add(K_EVENT, e);
    emu_status st = EMU_OK;
    if (e->handle == 0) {
        st = EMU_E_OUT_OF_MEMORY;
        free(e);
    } else {
        g.live_events++;
        *out = e->handle;
    }
    unlock();
    return st;
}

emu_status emuc_event_destroy(uint64_t h) {
    lock();
    event *e = table_take(h, K_EVENT);
    if (e == NULL) {
        unlock();
        return EMU_E_INVALID_HANDLE;
    }
    g.live_events--;
    /* A queued record keeps its own reference and completes into nothing. */
    if (e->last_rec) op_unref(e->last_rec);
    free(e);
    unlock();
    return EMU_OK;
}

/* Enqueue a record of `e` on `s`, a stream not capturing (g.mu held). */
static emu_status record_on(event *e, stream *s) {
    op *o = calloc(1, sizeof *o);
    if (o == NULL) return EMU_E_OUT_OF_MEMORY;
    o->type = OP_RECORD;
    o->timing = e->timing;
    o->refs = 1; /* the event's reference */
    if (e->last_rec) op_unref(e->last_rec);
    e->last_rec = o;
    e->captured = 0;
    if (g.instant && s->head == NULL) {
        /* An instantly fast device: the idle stream reaches the record at once, on the
         * caller's thread, and no worker is woken (see EMU_INSTANT in README.md). */
        o->stamp_ns = device_clock_ns();
        o->done = 1;
        log_op(s, o, o->stamp_ns, o->stamp_ns);
    } else {
        enqueue(s, o);
    }
    return EMU_OK;
}

emu_status emuc_event_record(uint64_t h, int dev, uint64_t sh, int external) {
    emu_status st;
    stream *s = NULL;
    lock();
    event *e = table_get(h, K_EVENT);
    if (e == NULL) {
        st = EMU_E_INVALID_HANDLE;
    } else if ((st = stream_resolve(dev, sh, &s)) != EMU_OK) {
        /* st says why */
    } else if (s->dev != e->dev) {
        /* Event and stream must belong to one device, as both drivers require. */
        st = EMU_E_INVALID_HANDLE;
    } else if (external && s->capture == EMU_CAPTURE_NONE) {
        st = EMU_E_INVALID_VALUE; /* the external flag is for a capture only */
    } else if (external) {
        /* An event-record node: the event is left as it is, and each launch records it. */
        st = capture_add(s, N_RECORD, h, NULL, NULL);
    } else if (s->capture != EMU_CAPTURE_NONE) {
        st = capture_node(s);
        if (st == EMU_OK) {
            if (e->last_rec) op_unref(e->last_rec);
            e->last_rec = NULL;
            e->captured = 1;
            e->capture_seq = s->capture_seq;
        }
    } else {
        st = record_on(e, s);
    }
    unlock();
    return st;
}

emu_status emuc_event_query(uint64_t h) {
    emu_status st = EMU_OK;
    lock();
    event *e = table_get(h, K_EVENT);
    if (e == NULL) st = EMU_E_INVALID_HANDLE;
    else if (e->captured) st = captured_status(e);
    else if (e->last_rec != NULL && !e->last_rec->done) st = EMU_E_NOT_READY;
    unlock();
    return st;
}

emu_status emuc_event_synchronize(uint64_t h) {
    emu_status st = EMU_OK;
    lock();
    event *e = table_get(h, K_EVENT);
    if (e == NULL) {
        st = EMU_E_INVALID_HANDLE;
    } else if (e->captured) {
        st = captured_status(e);
    } else if (e->last_rec != NULL) {
        /* Hold the record, not the event: either may be re-recorded or destroyed meanwhile. */
        op *r = e->last_rec;
        r->refs++;
        wait_while(e->blocking, e->dev, record_pending, r);
        op_unref(r);
    }
    unlock();
    return st;
}

emu_status emuc_event_elapsed(float *ms, uint64_t start, uint64_t end) {
    if (ms == NULL) return EMU_E_INVALID_VALUE;
    emu_status st = EMU_OK;
    lock();
    event *a = table_get(start, K_EVENT);
    event *b = table_get(end, K_EVENT);
    if (a == NULL || b == NULL) {
        st = EMU_E_INVALID_HANDLE;
    } else if (a->captured || b->captured) {
        st = a->captured ? captured_status(a) : captured_status(b);
    } else if (!a->timing || !b->timing || a->last_rec == NULL || b->last_rec == NULL) {
        st = EMU_E_INVALID_HANDLE;
    } else if (!a->last_rec->done || !b->last_rec->done) {
        st = EMU_E_NOT_READY;
    } else if (g.negative_elapsed > 0) {
        /* A slightly negative reading, as some drivers return for near-simultaneous events. */
        g.negative_elapsed--;
        *ms = -0.0005f;
    } else {
        *ms = (float)((double)(b->last_rec->stamp_ns - a->last_rec->stamp_ns) / 1e6);
    }
    unlock();
    return st;
}

/* -- streams ---------------------------------------------------------------------------- */

emu_status emuc_stream_create(int dev, int non_blocking, uint64_t *out) {
    if (out == NULL) return EMU_E_INVALID_VALUE;
    stream *s = NULL;
    lock();
    emu_status st = stream_new(dev, non_blocking, 0, &s);
    if (st == EMU_OK) {
        s->handle = table_add(K_STREAM, s);
        if (s->handle == 0) {
            /* Let the worker exit and free the stream. */
            s->destroyed = 1;
            kick(s);
            stream_unref(s);
            st = EMU_E_OUT_OF_MEMORY;
        } else {
            g.live_streams++;
            *out = s->handle;
        }
    }
    unlock();
    return st;
}

static int stream_pending(const void *arg);

emu_status emuc_stream_destroy(uint64_t h) {
    lock();
    stream *waited = g.destroy_waits ? table_get(h, K_STREAM) : NULL;
    if (waited != NULL) {
        waited->refs++;
        wait_while(1, waited->dev, stream_pending, waited);
        stream_unref(waited);
    }
    stream *s = table_take(h, K_STREAM);
    if (s == NULL) {
        unlock();
        return EMU_E_INVALID_HANDLE;
    }
    g.live_streams--;
    s->destroyed = 1;
    capture_clear(s);
    kick(s);
    stream_unref(s);
    unlock();
    return EMU_OK;
}

emu_status emuc_stream_wait_event(int dev, uint64_t sh, uint64_t h) {
    emu_status st;
    stream *s = NULL;
    lock();
    event *e = table_get(h, K_EVENT);
    if (e == NULL) {
        st = EMU_E_INVALID_HANDLE;
    } else if ((st = stream_resolve(dev, sh, &s)) != EMU_OK) {
        /* st says why */
    } else if (s->capture != EMU_CAPTURE_NONE) {
        st = capture_node(s);
    } else if (e->captured) {
        /* Joining a capture from another stream is not emulated. */
        st = captured_status(e);
    } else if (e->last_rec != NULL && !e->last_rec->done) {
        op *o = calloc(1, sizeof *o);
        if (o == NULL) {
            st = EMU_E_OUT_OF_MEMORY;
        } else {
            /* The wait binds to the record current now, as a later re-record must not move it. */
            o->type = OP_WAIT;
            o->target = e->last_rec;
            o->target->refs++;
            enqueue(s, o);
        }
    }
    /* A never-recorded or already reached event: nothing to wait for. */
    unlock();
    return st;
}

emu_status emuc_stream_ctx(int dev, uint64_t sh, uint64_t *ctx) {
    if (ctx == NULL) return EMU_E_INVALID_VALUE;
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st == EMU_OK) {
        /* A stream belongs to its device's primary context, the only kind emulated. */
        *ctx = g.ctxs[s->dev].handle;
        if (*ctx == 0) st = EMU_E_INVALID_CONTEXT;
    }
    unlock();
    return st;
}

static int stream_pending(const void *arg) { return ((const stream *)arg)->pending > 0; }

emu_status emuc_stream_synchronize(int dev, uint64_t sh) {
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st == EMU_OK) {
        if (s->capture != EMU_CAPTURE_NONE) {
            /* Synchronizing a capturing stream is illegal and spoils the capture. */
            s->capture = EMU_CAPTURE_INVALIDATED;
            st = EMU_E_CAPTURE_UNSUPPORTED;
        } else {
            s->refs++;
            wait_while(0, s->dev, stream_pending, s);
            stream_unref(s);
        }
    }
    unlock();
    return st;
}

emu_status emuc_stream_query(int dev, uint64_t sh) {
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st == EMU_OK) {
        if (s->capture != EMU_CAPTURE_NONE) {
            s->capture = EMU_CAPTURE_INVALIDATED;
            st = EMU_E_CAPTURE_UNSUPPORTED;
        } else if (s->pending > 0) {
            st = EMU_E_NOT_READY;
        }
    }
    unlock();
    return st;
}

emu_status emuc_stream_is_capturing(int dev, uint64_t sh, int *status) {
    if (status == NULL) return EMU_E_INVALID_VALUE;
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st == EMU_OK) *status = s->capture;
    unlock();
    return st;
}

emu_status emuc_stream_begin_capture(int dev, uint64_t sh, int mode) {
    if (mode < EMU_CAPTURE_MODE_GLOBAL || mode > EMU_CAPTURE_MODE_RELAXED) {
        return EMU_E_INVALID_VALUE;
    }
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st == EMU_OK) {
        if (s->implicit) {
            st = EMU_E_CAPTURE_UNSUPPORTED; /* the implicit stream cannot be captured */
        } else if (s->capture != EMU_CAPTURE_NONE) {
            st = EMU_E_ILLEGAL_STATE;
        } else {
            s->capture = EMU_CAPTURE_ACTIVE;
            s->capture_mode = mode;
            s->capture_thread = pthread_self();
            s->capture_seq = ++g.capture_seqs;
        }
    }
    unlock();
    return st;
}

emu_status emuc_stream_end_capture(int dev, uint64_t sh, uint64_t *out) {
    if (out == NULL) return EMU_E_INVALID_VALUE;
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st != EMU_OK) {
        /* st says why */
    } else if (s->capture == EMU_CAPTURE_NONE) {
        st = EMU_E_ILLEGAL_STATE;
    } else if (s->capture_mode != EMU_CAPTURE_MODE_RELAXED &&
               !pthread_equal(s->capture_thread, pthread_self())) {
        st = EMU_E_CAPTURE_WRONG_THREAD;
    } else if (s->capture == EMU_CAPTURE_INVALIDATED) {
        capture_clear(s);
        *out = 0;
        st = EMU_E_CAPTURE_INVALIDATED;
    } else if ((st = graph_new(K_GRAPH, s->capture_ops, s->capture_len, out)) == EMU_OK) {
        capture_clear(s);
    }
    unlock();
    return st;
}

emu_status emuc_launch_host_func(int dev, uint64_t sh, emu_host_fn fn, void *user_data) {
    if (fn == NULL) return EMU_E_INVALID_VALUE;
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    if (st == EMU_OK) {
        /* Captured, it is a node each launch of the graph enqueues. */
        st = s->capture != EMU_CAPTURE_NONE ? capture_add(s, N_HOST, 0, fn, user_data)
                                            : host_on(s, fn, user_data);
    }
    unlock();
    return st;
}

static int device_pending(const void *arg) {
    int dev = *(const int *)arg;
    for (stream *s = g.streams; s != NULL; s = s->next) {
        if (s->dev == dev && s->pending > 0) return 1;
    }
    return 0;
}

emu_status emuc_device_synchronize(int dev) {
    lock();
    wait_while(0, dev, device_pending, &dev);
    unlock();
    return EMU_OK;
}

emu_status emuc_set_sched(int dev, int mode) {
    if (mode != EMU_SCHED_AUTO && mode != EMU_SCHED_SPIN && mode != EMU_SCHED_YIELD &&
        mode != EMU_SCHED_BLOCKING_SYNC) {
        return EMU_E_INVALID_VALUE;
    }
    emu_status st = EMU_OK;
    lock();
    if (dev < 0 || dev >= g.device_count) st = EMU_E_INVALID_DEVICE;
    else g.sched[dev] = mode;
    unlock();
    return st;
}

emu_status emuc_get_sched(int dev, int *mode) {
    if (mode == NULL) return EMU_E_INVALID_VALUE;
    emu_status st = EMU_OK;
    lock();
    if (dev < 0 || dev >= g.device_count) st = EMU_E_INVALID_DEVICE;
    else *mode = g.sched[dev];
    unlock();
    return st;
}

/* -- device memory ---------------------------------------------------------------------- */

emu_status emuc_mem_alloc(int dev, uint64_t bytes, uint64_t *ptr) {
    if (ptr == NULL || bytes == 0) return EMU_E_INVALID_VALUE;
    alloc *a = calloc(1, sizeof *a);
    unsigned char *base = a != NULL ? malloc(bytes) : NULL;
    if (base == NULL) {
        free(a);
        return EMU_E_OUT_OF_MEMORY;
    }
    a->base = base;
    a->bytes = bytes;
    a->dev = dev;
    a->refs = 1; /* the list's */
    lock();
    a->next = g.allocs;
    g.allocs = a;
    g.live_allocs++;
    unlock();
    *ptr = (uint64_t)(uintptr_t)base;
    return EMU_OK;
}

/* The live allocation of `dev` holding [ptr, ptr + bytes), or NULL (g.mu held). */
static alloc *alloc_find(int dev, uint64_t ptr, uint64_t bytes) {
    for (alloc *a = g.allocs; a != NULL; a = a->next) {
        uint64_t base = (uint64_t)(uintptr_t)a->base;
        if (a->dev == dev && ptr >= base && bytes <= a->bytes && ptr - base <= a->bytes - bytes) {
            return a;
        }
    }
    return NULL;
}

emu_status emuc_mem_free(uint64_t ptr) {
    emu_status st = EMU_E_INVALID_VALUE;
    lock();
    for (alloc **at = &g.allocs; *at != NULL; at = &(*at)->next) {
        alloc *a = *at;
        if ((uint64_t)(uintptr_t)a->base == ptr) {
            *at = a->next;
            g.live_allocs--;
            alloc_unref(a); /* a write still queued holds its own reference */
            st = EMU_OK;
            break;
        }
    }
    unlock();
    return st;
}

/* Enqueue a write of [ptr, ptr + bytes) in `a` on `s`, a stream not capturing (g.mu held). */
static emu_status memset_on(stream *s, alloc *a, uint64_t ptr, int value, uint64_t bytes) {
    op *o = calloc(1, sizeof *o);
    if (o == NULL) return EMU_E_OUT_OF_MEMORY;
    o->type = OP_MEMSET;
    o->mem = a;
    a->refs++;
    o->offset = ptr - (uint64_t)(uintptr_t)a->base;
    o->bytes = bytes;
    o->value = value;
    enqueue(s, o); /* the queue holds the only reference */
    return EMU_OK;
}

/* A launch's memset node: joins a capture, or writes what is still allocated (g.mu held). */
static emu_status memset_node(stream *s, const node *n) {
    if (s->capture != EMU_CAPTURE_NONE) return capture_memset(s, n->ptr, n->value, n->bytes);
    alloc *a = alloc_find(s->dev, n->ptr, n->bytes);
    return a == NULL ? EMU_OK : memset_on(s, a, n->ptr, n->value, n->bytes);
}

emu_status emuc_memset(int dev, uint64_t sh, uint64_t ptr, int value, uint64_t bytes) {
    stream *s = NULL;
    lock();
    emu_status st = stream_resolve(dev, sh, &s);
    alloc *a = st == EMU_OK && bytes > 0 ? alloc_find(s->dev, ptr, bytes) : NULL;
    if (st != EMU_OK || bytes == 0) {
        /* st says why, or there is nothing to write */
    } else if (a == NULL) {
        st = EMU_E_INVALID_VALUE;
    } else if (s->capture != EMU_CAPTURE_NONE) {
        st = capture_memset(s, ptr, value, bytes);
    } else {
        st = memset_on(s, a, ptr, value, bytes);
    }
    unlock();
    return st;
}

long long emuc_l2_cache_bytes(void) {
    lock();
    long long n = g.l2_bytes ? g.l2_bytes : g.l2_default;
    unlock();
    return n;
}

/* -- graphs ----------------------------------------------------------------------------- */

/* A new graph of `kind` holding a copy of `len` nodes, its handle in *out (g.mu held). */
static emu_status graph_new(int kind, const node *ops, long len, uint64_t *out) {
    graph *gr = calloc(1, sizeof *gr);
    node *copy = len > 0 ? malloc((size_t)len * sizeof *copy) : NULL;
    if (gr == NULL || (len > 0 && copy == NULL)) {
        free(gr);
        free(copy);
        return EMU_E_OUT_OF_MEMORY;
    }
    if (len > 0) memcpy(copy, ops, (size_t)len * sizeof *copy);
    gr->ops = copy;
    gr->len = len;
    gr->handle = table_add(kind, gr);
    if (gr->handle == 0) {
        free(copy);
        free(gr);
        return EMU_E_OUT_OF_MEMORY;
    }
    g.live_graphs++;
    *out = gr->handle;
    return EMU_OK;
}

static emu_status graph_free(uint64_t h, int kind) {
    emu_status st = EMU_OK;
    lock();
    graph *gr = table_take(h, kind);
    if (gr == NULL) {
        st = EMU_E_INVALID_HANDLE;
    } else {
        g.live_graphs--;
        free(gr->ops);
        free(gr);
    }
    unlock();
    return st;
}

emu_status emuc_graph_destroy(uint64_t h) { return graph_free(h, K_GRAPH); }
emu_status emuc_graph_exec_destroy(uint64_t h) { return graph_free(h, K_EXEC); }

emu_status emuc_graph_instantiate(uint64_t h, uint64_t *out) {
    if (out == NULL) return EMU_E_INVALID_VALUE;
    lock();
    graph *gr = table_get(h, K_GRAPH);
    emu_status st = gr == NULL ? EMU_E_INVALID_HANDLE : graph_new(K_EXEC, gr->ops, gr->len, out);
    unlock();
    return st;
}

/*
 * A launch does what the captured stream would have done, on `stream`: each external record
 * records its event (one destroyed since records nothing), each host function is enqueued.
 * Into a capturing stream, the graph's nodes join that capture.
 */
emu_status emuc_graph_launch(uint64_t h, int dev, uint64_t sh) {
    stream *s = NULL;
    lock();
    graph *gr = table_get(h, K_EXEC);
    emu_status st = gr == NULL ? EMU_E_INVALID_HANDLE : stream_resolve(dev, sh, &s);
    for (long i = 0; st == EMU_OK && i < gr->len; i++) {
        const node *n = &gr->ops[i];
        event *e = n->type == N_RECORD ? table_get(n->event, K_EVENT) : NULL;
        if (n->type == N_MEMSET) st = memset_node(s, n);
        else if (s->capture != EMU_CAPTURE_NONE) st = capture_add(s, n->type, n->event, n->fn, n->arg);
        else if (n->type == N_HOST) st = host_on(s, n->fn, n->arg);
        else if (e != NULL && e->dev == s->dev) st = record_on(e, s);
    }
    unlock();
    return st;
}

/* -- control API ------------------------------------------------------------------------ */

/* One of g's counters, read under the lock: what the getters below return. */
static long read_locked(const long *counter) {
    lock();
    long n = *counter;
    unlock();
    return n;
}

long emu_live_events(void) { return read_locked(&g.live_events); }
long emu_live_streams(void) { return read_locked(&g.live_streams); }
long emu_live_graphs(void) { return read_locked(&g.live_graphs); }

long emu_live_contexts(void) {
    lock();
    long n = 0;
    for (int i = 0; i < EMU_MAX_DEVICES; i++) n += g.ctxs[i].refs;
    unlock();
    return n;
}

int emu_inject_fault(const char *call_name, int count, int error_code) {
    if (call_name == NULL || *call_name == '\0' || count < 0 || error_code == 0) return -1;
    lock();
    callrec *r = call_find(call_name, 1);
    if (r != NULL) {
        r->fault_count = count;
        r->fault_code = error_code;
    }
    unlock();
    return r != NULL ? 0 : -1;
}

int emu_signal_calls(const char *call_name, int signo, int count) {
    if (call_name == NULL || *call_name == '\0' || count < 0 || signo <= 0) return -1;
    lock();
    callrec *r = call_find(call_name, 1);
    if (r != NULL) {
        r->signal_count = count;
        r->signo = signo;
    }
    unlock();
    return r != NULL ? 0 : -1;
}

void emu_clear_faults(void) {
    lock();
    for (int i = 0; i < g.ncalls; i++) g.calls[i].fault_count = 0;
    unlock();
}

int emu_set_device_count(int count) {
    if (count < 0 || count > EMU_MAX_DEVICES) return -1;
    lock();
    g.device_count = count;
    unlock();
    return 0;
}

void emu_set_driver_version(int version) {
    lock();
    g.driver_version = version > 0 ? version : 0;
    unlock();
}

void emu_set_negative_elapsed(int count) {
    lock();
    g.negative_elapsed = count > 0 ? count : 0;
    unlock();
}

long emu_calls(const char *call_name) {
    if (call_name == NULL) return 0;
    lock();
    callrec *r = call_find(call_name, 0);
    long n = r ? r->calls : 0;
    unlock();
    return n;
}

long emu_worker_wakeups(void) { return read_locked(&g.wakeups); }
long emu_spin_yields(void) { return read_locked(&g.spin_yields); }
long emu_spin_looks(void) { return read_locked(&g.spin_looks); }
long emu_host_waits(void) { return read_locked(&g.host_waits); }

void emu_reset_counters(void) {
    lock();
    g.wakeups = 0;
    g.spin_yields = 0;
    g.spin_looks = 0;
    for (int i = 0; i < g.ncalls; i++) g.calls[i].calls = 0;
    unlock();
}

long emu_live_allocations(void) { return read_locked(&g.live_allocs); }

void emu_set_l2_cache_bytes(long long bytes) {
    lock();
    g.l2_bytes = bytes > 0 ? bytes : 0;
    unlock();
}

void emu_set_memset_rate(long long bytes_per_us) {
    lock();
    g.memset_rate = bytes_per_us > 0 ? bytes_per_us : 0;
    unlock();
}

int emu_set_op_log(long capacity) {
    if (capacity < 0) return -1;
    logged_op *log = capacity > 0 ? calloc((size_t)capacity, sizeof *log) : NULL;
    if (capacity > 0 && log == NULL) return -1;
    lock();
    logged_op *old = g.log;
    g.log = log;
    g.log_cap = capacity;
    g.log_count = 0;
    unlock();
    free(old);
    return 0;
}

long emu_op_log_count(void) {
    lock();
    long n = g.log_count < g.log_cap ? g.log_count : g.log_cap;
    unlock();
    return n;
}

int emu_op_log_get(long i, uint64_t *stream_handle, int *kind, int *timing, int64_t *began_ns,
                   int64_t *ended_ns, long long *bytes) {
    int rc = -1;
    lock();
    long kept = g.log_count < g.log_cap ? g.log_count : g.log_cap;
    if (i >= 0 && i < kept) {
        /* Entry 0 is the oldest kept. */
        const logged_op *e = &g.log[(g.log_count - kept + i) % g.log_cap];
        if (stream_handle != NULL) *stream_handle = e->stream;
        if (kind != NULL) *kind = e->kind;
        if (timing != NULL) *timing = e->timing;
        if (began_ns != NULL) *began_ns = e->began_ns;
        if (ended_ns != NULL) *ended_ns = e->ended_ns;
        if (bytes != NULL) *bytes = e->bytes;
        rc = 0;
    }
    unlock();
    return rc;
}
