/*
 * Emulated CUDA driver (libcuda.so.1): the driver calls eventapi's cuda backend uses, spelled
 * with the real names, signatures and error codes of cuda.h, over the emulation core.
 *
 * cuda.bindings resolves every function through cuGetProcAddress_v2 (base name + the CUDA
 * version that introduced the ABI it expects); the functions are also exported under their
 * real names (cuEventDestroy_v2 ...) for callers that dlsym them.
 *
 * CUDA specifics kept here, not in the core: cuInit, primary contexts and the per-thread
 * context stack (event and stream calls need a current context), the sentinel streams
 * (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD all name the context's implicit stream).
 */
#define _GNU_SOURCE
#include "emu_core.h"
#include "emu_ids.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a spinning host wait under CU_CTX_SCHED_AUTO treats its core; see emu_core.h. */
const int emu_spin_policy = EMU_SPIN_AUTO_CUDA;

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUevent;
typedef void *CUstream;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef uint64_t cuuint64_t;
typedef unsigned long long CUdeviceptr;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
typedef void (*CUhostFn)(void *userData);

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_CAPTURED_EVENT = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_UNKNOWN = 999,
};

/* The version cuDriverGetVersion reports when neither the environment (EMU_CUDA_DRIVER_VERSION)
 * nor emu_set_driver_version says otherwise. */
#define EMU_CUDA_DEFAULT_DRIVER_VERSION 13000

#define CU_STREAM_LEGACY ((uintptr_t)0x1)
#define CU_STREAM_PER_THREAD ((uintptr_t)0x2)

/* CUdriverProcAddressQueryResult */
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2 };

static const CUresult status_code[EMU_STATUS_COUNT] = {
    [EMU_OK] = CUDA_SUCCESS,
    [EMU_E_INVALID_VALUE] = CUDA_ERROR_INVALID_VALUE,
    [EMU_E_NOT_INITIALIZED] = CUDA_ERROR_NOT_INITIALIZED,
    [EMU_E_NO_DEVICE] = CUDA_ERROR_NO_DEVICE,
    [EMU_E_INVALID_DEVICE] = CUDA_ERROR_INVALID_DEVICE,
    [EMU_E_INVALID_CONTEXT] = CUDA_ERROR_INVALID_CONTEXT,
    [EMU_E_INVALID_HANDLE] = CUDA_ERROR_INVALID_HANDLE,
    [EMU_E_ILLEGAL_STATE] = CUDA_ERROR_ILLEGAL_STATE,
    [EMU_E_NOT_FOUND] = CUDA_ERROR_NOT_FOUND,
    [EMU_E_NOT_READY] = CUDA_ERROR_NOT_READY,
    [EMU_E_CAPTURE_UNSUPPORTED] = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    [EMU_E_CAPTURE_INVALIDATED] = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
    [EMU_E_CAPTURE_WRONG_THREAD] = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
    [EMU_E_CAPTURED_EVENT] = CUDA_ERROR_CAPTURED_EVENT,
    [EMU_E_OUT_OF_MEMORY] = CUDA_ERROR_OUT_OF_MEMORY,
    [EMU_E_UNKNOWN] = CUDA_ERROR_UNKNOWN,
};

static CUresult code(emu_status st) {
    return (st >= 0 && st < EMU_STATUS_COUNT) ? status_code[st] : CUDA_ERROR_UNKNOWN;
}

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* Count the call, then return an injected fault before doing anything else. */
#define ENTER(name)                                                                           \
    do {                                                                                      \
        static int slot_ = -1; /* this site's call record (see emuc_enter_at) */             \
        int fault_ = emuc_enter_at(&slot_, name);                                             \
        if (fault_ != 0) return (CUresult)fault_;                                             \
    } while (0)

#define H(p) ((uint64_t)(uintptr_t)(p))
#define P(h) ((void *)(uintptr_t)(h))

/* -- initialization and the per-thread context stack ------------------------------------ */

static int initialized; /* accessed with __atomic builtins */

#define CTX_STACK_DEPTH 32
static _Thread_local uint64_t ctx_stack[CTX_STACK_DEPTH];
static _Thread_local int ctx_depth;

static int is_initialized(void) { return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE); }

/* The device of the calling thread's current context. */
static CUresult current_device(int *dev) {
    if (!is_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx_depth == 0 || ctx_stack[ctx_depth - 1] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    return code(emuc_ctx_device(ctx_stack[ctx_depth - 1], dev));
}

#define NEED_CONTEXT(dev)                                                                     \
    do {                                                                                      \
        CUresult rc_ = current_device(&(dev));                                                \
        if (rc_ != CUDA_SUCCESS) return rc_;                                                  \
    } while (0)

#define NEED_INIT()                                                                           \
    do {                                                                                      \
        if (!is_initialized()) return CUDA_ERROR_NOT_INITIALIZED;                             \
    } while (0)

/* 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD all name the context's implicit stream. */
static uint64_t stream_arg(CUstream s) {
    uintptr_t v = (uintptr_t)s;
    if (v == 0 || v == CU_STREAM_LEGACY || v == CU_STREAM_PER_THREAD) return EMU_STREAM_DEFAULT;
    return (uint64_t)v;
}

/* -- initialization, version, errors ---------------------------------------------------- */

static CUresult impl_cuInit(unsigned int flags) {
    ENTER("cuInit");
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (emuc_device_count() == 0) return CUDA_ERROR_NO_DEVICE;
    __atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/*
 * The driver version this process reports unless emu_set_driver_version overrides it:
 * EMU_CUDA_DRIVER_VERSION as CUDA encodes it (12040 for CUDA 12.4), else 13000. Read once, so
 * a test picks the driver a whole subprocess sees, as a machine's installed driver would be.
 */
static int env_version;
static void read_env_version(void) {
    const char *v = getenv("EMU_CUDA_DRIVER_VERSION");
    char *end = NULL;
    long n = v != NULL ? strtol(v, &end, 10) : 0;
    env_version = end != NULL && end != v && *end == '\0' && n > 0 && n < 1000000
                      ? (int)n
                      : EMU_CUDA_DEFAULT_DRIVER_VERSION;
}
static int default_driver_version(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_env_version);
    return env_version;
}

static CUresult impl_cuDriverGetVersion(int *version) {
    ENTER("cuDriverGetVersion");
    if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
    *version = emuc_driver_version(default_driver_version());
    return CUDA_SUCCESS;
}

/* The name (0) or the text (1) of a code, as both lookups answer: unknown -> INVALID_VALUE. */
static CUresult describe(CUresult error, int text, const char **str) {
    if (str == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *str = text ? errors[i].text : errors[i].name;
            return CUDA_SUCCESS;
        }
    }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult impl_cuGetErrorName(CUresult error, const char **str) {
    ENTER("cuGetErrorName");
    return describe(error, 0, str);
}

static CUresult impl_cuGetErrorString(CUresult error, const char **str) {
    ENTER("cuGetErrorString");
    return describe(error, 1, str);
}

/* -- devices and contexts --------------------------------------------------------------- */

static CUresult impl_cuDeviceGetCount(int *count) {
    ENTER("cuDeviceGetCount");
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    *count = emuc_device_count();
    return CUDA_SUCCESS;
}

static CUresult impl_cuDeviceGet(CUdevice *device, int ordinal) {
    ENTER("cuDeviceGet");
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (ordinal < 0 || ordinal >= emuc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult impl_cuDeviceGetName(char *name, int len, CUdevice dev) {
    ENTER("cuDeviceGetName");
    if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (dev < 0 || dev >= emuc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Emulated CUDA Device %d", dev);
    return CUDA_SUCCESS;
}

/* The attributes the emulated devices report: the L2 cache size alone. */
enum { CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38 };

static CUresult impl_cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
    ENTER("cuDeviceGetAttribute");
    if (pi == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (dev < 0 || dev >= emuc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
    if (attrib != CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) return CUDA_ERROR_INVALID_VALUE;
    long long bytes = emuc_l2_cache_bytes();
    *pi = bytes > 0x7fffffffLL ? 0x7fffffff : (int)bytes;
    return CUDA_SUCCESS;
}

/* The device's UUID, the one the emulated NVML library reports for it (emu_ids.h). */
static CUresult impl_cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    ENTER("cuDeviceGetUuid");
    if (uuid == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (dev < 0 || dev >= emuc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
    unsigned char bytes[16];
    emu_device_uuid(dev, bytes);
    memcpy(uuid->bytes, bytes, sizeof bytes);
    return CUDA_SUCCESS;
}

static CUresult impl_cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    ENTER("cuDeviceGetPCIBusId");
    if (pciBusId == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (dev < 0 || dev >= emuc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", emu_device_pci_bus(dev));
    return CUDA_SUCCESS;
}

static CUresult impl_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    ENTER("cuDevicePrimaryCtxRetain");
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    uint64_t h = 0;
    CUresult rc = code(emuc_ctx_retain(dev, &h));
    if (rc == CUDA_SUCCESS) *pctx = P(h);
    return rc;
}

static CUresult impl_cuDevicePrimaryCtxRelease(CUdevice dev) {
    ENTER("cuDevicePrimaryCtxRelease");
    NEED_INIT();
    return code(emuc_ctx_release(dev));
}

/*
 * The primary context's scheduling flags decide how a host thread waits for the device:
 * CU_CTX_SCHED_BLOCKING_SYNC sleeps; SPIN spins on the core, YIELD yields it between looks,
 * AUTO (0, the default) does what CU_CTX_SCHED_AUTO documents (see wait_while in emu_core.c).
 * The values are EMU_SCHED_*'s. The other flag bits are accepted and ignored.
 */
enum { CU_CTX_SCHED_MASK = 7 };

static CUresult impl_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    ENTER("cuDevicePrimaryCtxSetFlags");
    NEED_INIT();
    return code(emuc_set_sched(dev, (int)(flags & CU_CTX_SCHED_MASK)));
}

static CUresult impl_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    ENTER("cuDevicePrimaryCtxGetState");
    if (flags == NULL || active == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    int sched = 0;
    CUresult rc = code(emuc_get_sched(dev, &sched));
    if (rc != CUDA_SUCCESS) return rc;
    *flags = (unsigned)sched;
    *active = emu_live_contexts() > 0;
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxGetCurrent(CUcontext *pctx) {
    ENTER("cuCtxGetCurrent");
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    *pctx = ctx_depth > 0 ? P(ctx_stack[ctx_depth - 1]) : NULL;
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxSetCurrent(CUcontext ctx) {
    ENTER("cuCtxSetCurrent");
    NEED_INIT();
    if (ctx == NULL) {
        /* Pops the top of the stack, or does nothing on an empty one. */
        if (ctx_depth > 0) ctx_depth--;
        return CUDA_SUCCESS;
    }
    int dev;
    if (emuc_ctx_device(H(ctx), &dev) != EMU_OK) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0) ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = H(ctx);
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxPushCurrent(CUcontext ctx) {
    ENTER("cuCtxPushCurrent");
    if (ctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    int dev;
    if (emuc_ctx_device(H(ctx), &dev) != EMU_OK) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK_DEPTH) return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = H(ctx);
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxPopCurrent(CUcontext *pctx) {
    ENTER("cuCtxPopCurrent");
    NEED_INIT();
    if (ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t h = ctx_stack[--ctx_depth];
    if (pctx != NULL) *pctx = P(h);
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxGetDevice(CUdevice *device) {
    ENTER("cuCtxGetDevice");
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    *device = dev;
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    ENTER("cuCtxGetDevice");
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    if (ctx == NULL) {
        NEED_CONTEXT(dev);
    } else {
        NEED_INIT();
        if (emuc_ctx_device(H(ctx), &dev) != EMU_OK) return CUDA_ERROR_INVALID_CONTEXT;
    }
    *device = dev;
    return CUDA_SUCCESS;
}

static CUresult impl_cuCtxSynchronize(void) {
    ENTER("cuCtxSynchronize");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_device_synchronize(dev));
}

static CUresult impl_cuCtxSynchronize_v2(CUcontext ctx) {
    ENTER("cuCtxSynchronize");
    int dev;
    if (ctx == NULL) {
        NEED_CONTEXT(dev);
    } else {
        NEED_INIT();
        if (emuc_ctx_device(H(ctx), &dev) != EMU_OK) return CUDA_ERROR_INVALID_CONTEXT;
    }
    return code(emuc_device_synchronize(dev));
}

/* -- events ----------------------------------------------------------------------------- */

enum { CU_EVENT_BLOCKING_SYNC = 1, CU_EVENT_DISABLE_TIMING = 2, CU_EVENT_INTERPROCESS = 4 };

static CUresult impl_cuEventCreate(CUevent *phEvent, unsigned int flags) {
    ENTER("cuEventCreate");
    if (phEvent == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if ((flags & ~all) != 0) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t h = 0;
    CUresult rc = code(emuc_event_create(dev, !(flags & CU_EVENT_DISABLE_TIMING),
                                         (flags & CU_EVENT_BLOCKING_SYNC) != 0, &h));
    if (rc == CUDA_SUCCESS) *phEvent = P(h);
    return rc;
}

static CUresult impl_cuEventDestroy(CUevent hEvent) {
    ENTER("cuEventDestroy");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_event_destroy(H(hEvent)));
}

static CUresult impl_cuEventRecord(CUevent hEvent, CUstream hStream) {
    ENTER("cuEventRecord");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_event_record(H(hEvent), dev, stream_arg(hStream), 0));
}

/* CU_EVENT_RECORD_EXTERNAL (1) in a capture makes an event-record node, stamped at each launch;
   outside a capture CUDA refuses it ("This flag is invalid when used outside of capture"). */
static CUresult impl_cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned flags) {
    ENTER("cuEventRecordWithFlags");
    int dev;
    NEED_CONTEXT(dev);
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE; /* DEFAULT 0, EXTERNAL 1 */
    return code(emuc_event_record(H(hEvent), dev, stream_arg(hStream), (int)flags));
}

static CUresult impl_cuEventSynchronize(CUevent hEvent) {
    ENTER("cuEventSynchronize");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_event_synchronize(H(hEvent)));
}

static CUresult impl_cuEventQuery(CUevent hEvent) {
    ENTER("cuEventQuery");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_event_query(H(hEvent)));
}

static CUresult impl_cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    ENTER("cuEventElapsedTime");
    if (pMilliseconds == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_event_elapsed(pMilliseconds, H(hStart), H(hEnd)));
}

/* -- memory ----------------------------------------------------------------------------- */

static CUresult impl_cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    ENTER("cuMemAlloc");
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    uint64_t ptr = 0;
    CUresult rc = code(emuc_mem_alloc(dev, bytesize, &ptr));
    if (rc == CUDA_SUCCESS) *dptr = ptr;
    return rc;
}

static CUresult impl_cuMemFree(CUdeviceptr dptr) {
    ENTER("cuMemFree");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_mem_free(dptr));
}

static CUresult impl_cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream) {
    ENTER("cuMemsetD8Async");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_memset(dev, stream_arg(hStream), dstDevice, uc, N));
}

/* -- streams ---------------------------------------------------------------------------- */

enum { CU_STREAM_NON_BLOCKING = 1 };

static CUresult impl_cuStreamCreate(CUstream *phStream, unsigned int flags) {
    ENTER("cuStreamCreate");
    if (phStream == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    if ((flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
    uint64_t h = 0;
    CUresult rc = code(emuc_stream_create(dev, (flags & CU_STREAM_NON_BLOCKING) != 0, &h));
    if (rc == CUDA_SUCCESS) *phStream = P(h);
    return rc;
}

static CUresult impl_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                int priority) {
    ENTER("cuStreamCreateWithPriority");
    (void)priority; /* priorities are accepted and ignored */
    if (phStream == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    if ((flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
    uint64_t h = 0;
    CUresult rc = code(emuc_stream_create(dev, (flags & CU_STREAM_NON_BLOCKING) != 0, &h));
    if (rc == CUDA_SUCCESS) *phStream = P(h);
    return rc;
}

static CUresult impl_cuStreamDestroy(CUstream hStream) {
    ENTER("cuStreamDestroy");
    int dev;
    NEED_CONTEXT(dev);
    /* The implicit streams are not the caller's to destroy. */
    if (stream_arg(hStream) == EMU_STREAM_DEFAULT) return CUDA_ERROR_INVALID_HANDLE;
    return code(emuc_stream_destroy(H(hStream)));
}

static CUresult impl_cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
    ENTER("cuStreamWaitEvent");
    int dev;
    NEED_CONTEXT(dev);
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE; /* DEFAULT 0, EXTERNAL 1 */
    return code(emuc_stream_wait_event(dev, stream_arg(hStream), H(hEvent)));
}

static CUresult impl_cuStreamSynchronize(CUstream hStream) {
    ENTER("cuStreamSynchronize");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_stream_synchronize(dev, stream_arg(hStream)));
}

static CUresult impl_cuStreamQuery(CUstream hStream) {
    ENTER("cuStreamQuery");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_stream_query(dev, stream_arg(hStream)));
}

static CUresult impl_cuStreamIsCapturing(CUstream hStream, int *captureStatus) {
    ENTER("cuStreamIsCapturing");
    if (captureStatus == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_stream_is_capturing(dev, stream_arg(hStream), captureStatus));
}

static CUresult impl_cuStreamBeginCapture_v2(CUstream hStream, int mode) {
    ENTER("cuStreamBeginCapture");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_stream_begin_capture(dev, stream_arg(hStream), mode));
}

/* The CUDA 10.0 ABI had no mode argument; it captured in global mode. */
static CUresult impl_cuStreamBeginCapture_v1(CUstream hStream) {
    ENTER("cuStreamBeginCapture");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_stream_begin_capture(dev, stream_arg(hStream), EMU_CAPTURE_MODE_GLOBAL));
}

static CUresult impl_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    ENTER("cuStreamEndCapture");
    if (phGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    uint64_t h = 0;
    CUresult rc = code(emuc_stream_end_capture(dev, stream_arg(hStream), &h));
    *phGraph = P(h);
    return rc;
}

static CUresult impl_cuGraphDestroy(CUgraph hGraph) {
    ENTER("cuGraphDestroy");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_graph_destroy(H(hGraph)));
}

/* The CUDA 12 ABI of cuGraphInstantiate (cuda.h defines the name as this function). */
static CUresult impl_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags) {
    ENTER("cuGraphInstantiateWithFlags");
    if (phGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    (void)flags; /* no flag changes what the emulated graphs do */
    uint64_t h = 0;
    CUresult rc = code(emuc_graph_instantiate(H(hGraph), &h));
    if (rc == CUDA_SUCCESS) *phGraphExec = P(h);
    return rc;
}

static CUresult impl_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    ENTER("cuGraphLaunch");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_graph_launch(H(hGraphExec), dev, stream_arg(hStream)));
}

static CUresult impl_cuGraphExecDestroy(CUgraphExec hGraphExec) {
    ENTER("cuGraphExecDestroy");
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_graph_exec_destroy(H(hGraphExec)));
}

static CUresult impl_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
    ENTER("cuLaunchHostFunc");
    if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_launch_host_func(dev, stream_arg(hStream), fn, userData));
}

static CUresult impl_cuLaunchHostFunc_v2(CUstream hStream, CUhostFn fn, void *userData,
                                         unsigned int syncMode) {
    ENTER("cuLaunchHostFunc");
    (void)syncMode; /* every host function runs in stream order on the stream's worker */
    if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    return code(emuc_launch_host_func(dev, stream_arg(hStream), fn, userData));
}

/* -- what cuda.core asks for beyond the backend's calls ---------------------------------- */

/* Streams accept priorities and ignore them; the range is the one current GPUs report. */
static CUresult impl_cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    ENTER("cuCtxGetStreamPriorityRange");
    int dev;
    NEED_CONTEXT(dev);
    if (leastPriority != NULL) *leastPriority = 0;
    if (greatestPriority != NULL) *greatestPriority = -5;
    return CUDA_SUCCESS;
}

/* cuda.core asks which context a stream it adopted belongs to before recording into it. */
static CUresult impl_cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
    ENTER("cuStreamGetCtx");
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    NEED_CONTEXT(dev);
    uint64_t h = 0;
    CUresult rc = code(emuc_stream_ctx(dev, stream_arg(hStream), &h));
    if (rc == CUDA_SUCCESS) *pctx = P(h);
    return rc;
}

/* The CUDA 12.5 ABI adds a green context, which the emulator never has. */
static CUresult impl_cuStreamGetCtx_v2(CUstream hStream, CUcontext *pctx, void **pGreenCtx) {
    CUresult rc = impl_cuStreamGetCtx(hStream, pctx);
    if (rc == CUDA_SUCCESS && pGreenCtx != NULL) *pGreenCtx = NULL;
    return rc;
}

/* -- cuGetProcAddress ------------------------------------------------------------------- */

/*
 * A name may have several ABIs; the caller passes the CUDA version whose ABI it expects and
 * gets the newest entry introduced at or before it. The flags (per-thread default stream or
 * legacy) select the same functions: the emulator has one implicit stream per device.
 */
static const struct {
    const char *name;
    int since;
    void *fn;
} procs[] = {
    {"cuInit", 2000, (void *)impl_cuInit},
    {"cuDriverGetVersion", 2020, (void *)impl_cuDriverGetVersion},
    {"cuGetErrorName", 6000, (void *)impl_cuGetErrorName},
    {"cuGetErrorString", 6000, (void *)impl_cuGetErrorString},
    {"cuDeviceGetCount", 2000, (void *)impl_cuDeviceGetCount},
    {"cuDeviceGet", 2000, (void *)impl_cuDeviceGet},
    {"cuDeviceGetName", 2000, (void *)impl_cuDeviceGetName},
    {"cuDeviceGetAttribute", 2000, (void *)impl_cuDeviceGetAttribute},
    {"cuDeviceGetUuid", 9020, (void *)impl_cuDeviceGetUuid},
    {"cuDeviceGetUuid", 11040, (void *)impl_cuDeviceGetUuid}, /* _v2: the same arguments */
    {"cuDeviceGetPCIBusId", 4010, (void *)impl_cuDeviceGetPCIBusId},
    {"cuMemAlloc", 3020, (void *)impl_cuMemAlloc},
    {"cuMemFree", 3020, (void *)impl_cuMemFree},
    {"cuMemsetD8Async", 3020, (void *)impl_cuMemsetD8Async},
    {"cuDevicePrimaryCtxRetain", 7000, (void *)impl_cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 7000, (void *)impl_cuDevicePrimaryCtxRelease},
    {"cuDevicePrimaryCtxSetFlags", 7000, (void *)impl_cuDevicePrimaryCtxSetFlags},
    {"cuDevicePrimaryCtxGetState", 7000, (void *)impl_cuDevicePrimaryCtxGetState},
    {"cuCtxGetCurrent", 4000, (void *)impl_cuCtxGetCurrent},
    {"cuCtxSetCurrent", 4000, (void *)impl_cuCtxSetCurrent},
    {"cuCtxPushCurrent", 4000, (void *)impl_cuCtxPushCurrent},
    {"cuCtxPopCurrent", 4000, (void *)impl_cuCtxPopCurrent},
    {"cuCtxGetDevice", 2000, (void *)impl_cuCtxGetDevice},
    {"cuCtxGetDevice", 13000, (void *)impl_cuCtxGetDevice_v2},
    {"cuCtxSynchronize", 2000, (void *)impl_cuCtxSynchronize},
    {"cuCtxSynchronize", 13000, (void *)impl_cuCtxSynchronize_v2},
    {"cuEventCreate", 2000, (void *)impl_cuEventCreate},
    {"cuEventDestroy", 2000, (void *)impl_cuEventDestroy},
    {"cuEventRecord", 2000, (void *)impl_cuEventRecord},
    {"cuEventRecordWithFlags", 11010, (void *)impl_cuEventRecordWithFlags},
    {"cuEventSynchronize", 2000, (void *)impl_cuEventSynchronize},
    {"cuEventQuery", 2000, (void *)impl_cuEventQuery},
    {"cuEventElapsedTime", 2000, (void *)impl_cuEventElapsedTime},
    {"cuStreamCreate", 2000, (void *)impl_cuStreamCreate},
    {"cuStreamCreateWithPriority", 5050, (void *)impl_cuStreamCreateWithPriority},
    {"cuStreamDestroy", 2000, (void *)impl_cuStreamDestroy},
    {"cuStreamWaitEvent", 3020, (void *)impl_cuStreamWaitEvent},
    {"cuStreamSynchronize", 2000, (void *)impl_cuStreamSynchronize},
    {"cuStreamQuery", 2000, (void *)impl_cuStreamQuery},
    {"cuStreamIsCapturing", 10000, (void *)impl_cuStreamIsCapturing},
    {"cuStreamBeginCapture", 10000, (void *)impl_cuStreamBeginCapture_v1},
    {"cuStreamBeginCapture", 10010, (void *)impl_cuStreamBeginCapture_v2},
    {"cuStreamEndCapture", 10000, (void *)impl_cuStreamEndCapture},
    {"cuGraphDestroy", 10000, (void *)impl_cuGraphDestroy},
    {"cuGraphInstantiateWithFlags", 11040, (void *)impl_cuGraphInstantiateWithFlags},
    {"cuGraphLaunch", 10000, (void *)impl_cuGraphLaunch},
    {"cuGraphExecDestroy", 10000, (void *)impl_cuGraphExecDestroy},
    {"cuLaunchHostFunc", 10000, (void *)impl_cuLaunchHostFunc},
    {"cuLaunchHostFunc", 13020, (void *)impl_cuLaunchHostFunc_v2},
    {"cuCtxGetStreamPriorityRange", 5050, (void *)impl_cuCtxGetStreamPriorityRange},
    {"cuStreamGetCtx", 9020, (void *)impl_cuStreamGetCtx},
    {"cuStreamGetCtx", 12050, (void *)impl_cuStreamGetCtx_v2},
    {"cuGetProcAddress", 11030, NULL}, /* filled in by lookup(): defined below */
    {"cuGetProcAddress", 12000, NULL},
};

static CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags, int *symbolStatus);
static CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags);

static void *proc_fn(size_t i) {
    if (procs[i].fn != NULL) return procs[i].fn;
    return procs[i].since >= 12000 ? (void *)impl_cuGetProcAddress_v2
                                   : (void *)impl_cuGetProcAddress;
}

/* CU_GET_PROC_ADDRESS_* outcome of looking `symbol` up for `version`; *fn set on success. */
static int lookup(const char *symbol, int version, void **fn) {
    int known = 0, best_since = -1;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].name, symbol) != 0) continue;
        known = 1;
        if (procs[i].since <= version && procs[i].since > best_since) {
            best_since = procs[i].since;
            *fn = proc_fn(i);
        }
    }
    if (best_since >= 0) return CU_GET_PROC_ADDRESS_SUCCESS;
    return known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                 : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
}

/*
 * Every lookup made, oldest first, up to EMU_LOOKUPS of them: the name, the CUDA version whose
 * ABI was asked for and the flags, so that a test can see which ABI and which default-stream
 * variant each caller resolved (emu_cuda_lookup). Only the count is shared between threads;
 * each entry is written before the count that covers it is published.
 */
#define EMU_LOOKUPS 8192
static struct {
    char name[64];
    int version;
    unsigned long long flags;
} lookups[EMU_LOOKUPS];
static long lookup_slots; /* claimed */
static long lookup_count; /* written */

static void log_lookup(const char *symbol, int version, cuuint64_t flags) {
    long i = __atomic_fetch_add(&lookup_slots, 1, __ATOMIC_RELAXED);
    if (i >= EMU_LOOKUPS) return;
    snprintf(lookups[i].name, sizeof lookups[i].name, "%s", symbol);
    lookups[i].version = version;
    lookups[i].flags = (unsigned long long)flags;
    long expected = i;
    while (!__atomic_compare_exchange_n(&lookup_count, &expected, i + 1, 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        expected = i; /* an earlier slot is still being written */
}

/* How many lookups were logged (at most EMU_LOOKUPS). */
EMU_EXPORT long emu_cuda_lookups(void) { return __atomic_load_n(&lookup_count, __ATOMIC_ACQUIRE); }

/* Lookup i's name (into name, size bytes), version and flags; -1 when there is no such one. */
EMU_EXPORT int emu_cuda_lookup(long i, char *name, size_t size, int *version,
                               unsigned long long *flags) {
    if (i < 0 || i >= emu_cuda_lookups() || name == NULL || size == 0) return -1;
    snprintf(name, size, "%s", lookups[i].name);
    if (version != NULL) *version = lookups[i].version;
    if (flags != NULL) *flags = lookups[i].flags;
    return 0;
}

static CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags, int *symbolStatus) {
    ENTER("cuGetProcAddress");
    if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
    log_lookup(symbol, cudaVersion, flags);
    *pfn = NULL;
    int status = lookup(symbol, cudaVersion, pfn);
    if (symbolStatus != NULL) *symbolStatus = status;
    return status == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* The exported unversioned name keeps the CUDA 11 ABI (no status argument). */
static CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags) {
    return impl_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* -- exported names --------------------------------------------------------------------- */

#define EXPORT(ret, name, params, impl)                                                       \
    ret name params __attribute__((alias(#impl), visibility("default")))

EXPORT(CUresult, cuGetProcAddress, (const char *, void **, int, cuuint64_t),
       impl_cuGetProcAddress);
EXPORT(CUresult, cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, int *),
       impl_cuGetProcAddress_v2);
EXPORT(CUresult, cuInit, (unsigned int), impl_cuInit);
EXPORT(CUresult, cuDriverGetVersion, (int *), impl_cuDriverGetVersion);
EXPORT(CUresult, cuGetErrorName, (CUresult, const char **), impl_cuGetErrorName);
EXPORT(CUresult, cuGetErrorString, (CUresult, const char **), impl_cuGetErrorString);
EXPORT(CUresult, cuDeviceGetCount, (int *), impl_cuDeviceGetCount);
EXPORT(CUresult, cuDeviceGet, (CUdevice *, int), impl_cuDeviceGet);
EXPORT(CUresult, cuDeviceGetName, (char *, int, CUdevice), impl_cuDeviceGetName);
EXPORT(CUresult, cuDeviceGetAttribute, (int *, int, CUdevice), impl_cuDeviceGetAttribute);
EXPORT(CUresult, cuDeviceGetUuid, (CUuuid *, CUdevice), impl_cuDeviceGetUuid);
EXPORT(CUresult, cuDeviceGetUuid_v2, (CUuuid *, CUdevice), impl_cuDeviceGetUuid);
EXPORT(CUresult, cuDeviceGetPCIBusId, (char *, int, CUdevice), impl_cuDeviceGetPCIBusId);
EXPORT(CUresult, cuMemAlloc, (CUdeviceptr *, size_t), impl_cuMemAlloc);
EXPORT(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t), impl_cuMemAlloc);
EXPORT(CUresult, cuMemFree, (CUdeviceptr), impl_cuMemFree);
EXPORT(CUresult, cuMemFree_v2, (CUdeviceptr), impl_cuMemFree);
EXPORT(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream),
       impl_cuMemsetD8Async);
EXPORT(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice),
       impl_cuDevicePrimaryCtxRetain);
EXPORT(CUresult, cuDevicePrimaryCtxRelease, (CUdevice), impl_cuDevicePrimaryCtxRelease);
EXPORT(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice), impl_cuDevicePrimaryCtxRelease);
EXPORT(CUresult, cuDevicePrimaryCtxSetFlags, (CUdevice, unsigned int),
       impl_cuDevicePrimaryCtxSetFlags);
EXPORT(CUresult, cuDevicePrimaryCtxSetFlags_v2, (CUdevice, unsigned int),
       impl_cuDevicePrimaryCtxSetFlags);
EXPORT(CUresult, cuDevicePrimaryCtxGetState, (CUdevice, unsigned int *, int *),
       impl_cuDevicePrimaryCtxGetState);
EXPORT(CUresult, cuCtxGetCurrent, (CUcontext *), impl_cuCtxGetCurrent);
EXPORT(CUresult, cuCtxSetCurrent, (CUcontext), impl_cuCtxSetCurrent);
EXPORT(CUresult, cuCtxPushCurrent, (CUcontext), impl_cuCtxPushCurrent);
EXPORT(CUresult, cuCtxPushCurrent_v2, (CUcontext), impl_cuCtxPushCurrent);
EXPORT(CUresult, cuCtxPopCurrent, (CUcontext *), impl_cuCtxPopCurrent);
EXPORT(CUresult, cuCtxPopCurrent_v2, (CUcontext *), impl_cuCtxPopCurrent);
EXPORT(CUresult, cuCtxGetDevice, (CUdevice *), impl_cuCtxGetDevice);
EXPORT(CUresult, cuCtxGetDevice_v2, (CUdevice *, CUcontext), impl_cuCtxGetDevice_v2);
EXPORT(CUresult, cuCtxSynchronize, (void), impl_cuCtxSynchronize);
EXPORT(CUresult, cuCtxSynchronize_v2, (CUcontext), impl_cuCtxSynchronize_v2);
EXPORT(CUresult, cuEventCreate, (CUevent *, unsigned int), impl_cuEventCreate);
EXPORT(CUresult, cuEventDestroy, (CUevent), impl_cuEventDestroy);
EXPORT(CUresult, cuEventDestroy_v2, (CUevent), impl_cuEventDestroy);
EXPORT(CUresult, cuEventRecord, (CUevent, CUstream), impl_cuEventRecord);
EXPORT(CUresult, cuEventRecordWithFlags, (CUevent, CUstream, unsigned int),
       impl_cuEventRecordWithFlags);
EXPORT(CUresult, cuEventSynchronize, (CUevent), impl_cuEventSynchronize);
EXPORT(CUresult, cuEventQuery, (CUevent), impl_cuEventQuery);
EXPORT(CUresult, cuEventElapsedTime, (float *, CUevent, CUevent), impl_cuEventElapsedTime);
EXPORT(CUresult, cuEventElapsedTime_v2, (float *, CUevent, CUevent), impl_cuEventElapsedTime);
EXPORT(CUresult, cuStreamCreate, (CUstream *, unsigned int), impl_cuStreamCreate);
EXPORT(CUresult, cuStreamCreateWithPriority, (CUstream *, unsigned int, int),
       impl_cuStreamCreateWithPriority);
EXPORT(CUresult, cuStreamDestroy, (CUstream), impl_cuStreamDestroy);
EXPORT(CUresult, cuStreamDestroy_v2, (CUstream), impl_cuStreamDestroy);
EXPORT(CUresult, cuStreamWaitEvent, (CUstream, CUevent, unsigned int), impl_cuStreamWaitEvent);
EXPORT(CUresult, cuStreamSynchronize, (CUstream), impl_cuStreamSynchronize);
EXPORT(CUresult, cuStreamQuery, (CUstream), impl_cuStreamQuery);
EXPORT(CUresult, cuStreamIsCapturing, (CUstream, int *), impl_cuStreamIsCapturing);
EXPORT(CUresult, cuStreamBeginCapture, (CUstream, int), impl_cuStreamBeginCapture_v2);
EXPORT(CUresult, cuStreamBeginCapture_v2, (CUstream, int), impl_cuStreamBeginCapture_v2);
EXPORT(CUresult, cuStreamEndCapture, (CUstream, CUgraph *), impl_cuStreamEndCapture);
EXPORT(CUresult, cuGraphDestroy, (CUgraph), impl_cuGraphDestroy);
EXPORT(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long),
       impl_cuGraphInstantiateWithFlags);
EXPORT(CUresult, cuGraphLaunch, (CUgraphExec, CUstream), impl_cuGraphLaunch);
EXPORT(CUresult, cuGraphExecDestroy, (CUgraphExec), impl_cuGraphExecDestroy);
EXPORT(CUresult, cuLaunchHostFunc, (CUstream, CUhostFn, void *), impl_cuLaunchHostFunc);
EXPORT(CUresult, cuCtxGetStreamPriorityRange, (int *, int *), impl_cuCtxGetStreamPriorityRange);
EXPORT(CUresult, cuStreamGetCtx, (CUstream, CUcontext *), impl_cuStreamGetCtx);
EXPORT(CUresult, cuStreamGetCtx_v2, (CUstream, CUcontext *, void **), impl_cuStreamGetCtx_v2);
EXPORT(CUresult, cuLaunchHostFunc_v2, (CUstream, CUhostFn, void *, unsigned int),
       impl_cuLaunchHostFunc_v2);
