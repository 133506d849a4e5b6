/*
 * Emulated HIP runtime (libamdhip64.so): the calls eventapi's hip backend uses, spelled with
 * the real names, signatures and error codes of hip_runtime_api.h, over the emulation core.
 * hip-python dlsym's each name on first use, so plain exports are all it needs.
 *
 * HIP specifics kept here, not in the core: no explicit initialization is required, and the
 * current device is per thread, device 0 for a thread that never called hipSetDevice; a
 * null stream (0) and hipStreamPerThread (2) name the device's implicit stream.
 */
#define _GNU_SOURCE
#include "emu_core.h"

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

/*
 * How a spinning host wait under hipDeviceScheduleAuto treats its core: a yield, what HIP
 * documents for its default with no more contexts than processors; see emu_core.h.
 */
const int emu_spin_policy = EMU_SPIN_YIELD_ALWAYS;

typedef int hipError_t;
typedef void *hipEvent_t;
typedef void *hipStream_t;
typedef void *hipGraph_t;
typedef void *hipGraphExec_t;
typedef void *hipGraphNode_t;
typedef void (*hipHostFn_t)(void *userData);

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = 201,
    hipErrorInvalidHandle = 400,
    hipErrorIllegalState = 401,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
    hipErrorIllegalAddress = 700,
    hipErrorNotSupported = 801,
    hipErrorStreamCaptureUnsupported = 900,
    hipErrorStreamCaptureInvalidated = 901,
    hipErrorCapturedEvent = 907,
    hipErrorStreamCaptureWrongThread = 908,
    hipErrorUnknown = 999,
};

/* HIP 7.15, encoded as major * 10000000 + minor * 100000 + patch; EMU_HIP_RUNTIME_VERSION in
 * the environment or emu_set_driver_version says otherwise. */
#define EMU_HIP_DEFAULT_VERSION 71500000

#define HIP_STREAM_PER_THREAD ((uintptr_t)0x2)

static const hipError_t status_code[EMU_STATUS_COUNT] = {
    [EMU_OK] = hipSuccess,
    [EMU_E_INVALID_VALUE] = hipErrorInvalidValue,
    [EMU_E_NOT_INITIALIZED] = hipErrorNotInitialized,
    [EMU_E_NO_DEVICE] = hipErrorNoDevice,
    [EMU_E_INVALID_DEVICE] = hipErrorInvalidDevice,
    [EMU_E_INVALID_CONTEXT] = hipErrorInvalidContext,
    [EMU_E_INVALID_HANDLE] = hipErrorInvalidHandle,
    [EMU_E_ILLEGAL_STATE] = hipErrorIllegalState,
    [EMU_E_NOT_FOUND] = hipErrorNotFound,
    [EMU_E_NOT_READY] = hipErrorNotReady,
    [EMU_E_CAPTURE_UNSUPPORTED] = hipErrorStreamCaptureUnsupported,
    [EMU_E_CAPTURE_INVALIDATED] = hipErrorStreamCaptureInvalidated,
    [EMU_E_CAPTURE_WRONG_THREAD] = hipErrorStreamCaptureWrongThread,
    [EMU_E_CAPTURED_EVENT] = hipErrorCapturedEvent,
    [EMU_E_OUT_OF_MEMORY] = hipErrorOutOfMemory,
    [EMU_E_UNKNOWN] = hipErrorUnknown,
};

static hipError_t code(emu_status st) {
    return (st >= 0 && st < EMU_STATUS_COUNT) ? status_code[st] : hipErrorUnknown;
}

static const struct {
    hipError_t code;
    const char *name;
    const char *text;
} errors[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorIllegalState, "hipErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorNotReady, "hipErrorNotReady", "device not ready"},
    {hipErrorIllegalAddress, "hipErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
    {hipErrorStreamCaptureUnsupported, "hipErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {hipErrorStreamCaptureInvalidated, "hipErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {hipErrorCapturedEvent, "hipErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {hipErrorStreamCaptureWrongThread, "hipErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

#define ENTER(name)                                                                           \
    do {                                                                                      \
        static int slot_ = -1; /* this site's call record (see emuc_enter_at) */             \
        int fault_ = emuc_enter_at(&slot_, name);                                             \
        if (fault_ != 0) return (hipError_t)fault_;                                           \
    } while (0)

#define H(p) ((uint64_t)(uintptr_t)(p))
#define P(h) ((void *)(uintptr_t)(h))

static _Thread_local int current_dev; /* 0 until the thread calls hipSetDevice */

/* The calling thread's device, checked against the device count. */
static hipError_t current_device(int *dev) {
    int n = emuc_device_count();
    if (n == 0) return hipErrorNoDevice;
    if (current_dev >= n) return hipErrorInvalidDevice;
    *dev = current_dev;
    return hipSuccess;
}

#define NEED_DEVICE(dev)                                                                      \
    do {                                                                                      \
        hipError_t rc_ = current_device(&(dev));                                              \
        if (rc_ != hipSuccess) return rc_;                                                    \
    } while (0)

static uint64_t stream_arg(hipStream_t s) {
    uintptr_t v = (uintptr_t)s;
    if (v == 0 || v == HIP_STREAM_PER_THREAD) return EMU_STREAM_DEFAULT;
    return (uint64_t)v;
}

/* -- initialization, versions, errors, devices ------------------------------------------ */

hipError_t hipInit(unsigned int flags) {
    ENTER("hipInit");
    if (flags != 0) return hipErrorInvalidValue;
    return emuc_device_count() == 0 ? hipErrorNoDevice : hipSuccess;
}

/*
 * The version this process reports unless emu_set_driver_version overrides it:
 * EMU_HIP_RUNTIME_VERSION as HIP encodes it (60241133 for HIP 6.2), else HIP 7.15. Read once,
 * so a test picks the runtime a whole subprocess sees, as a machine's installed ROCm would be.
 */
static int env_version;
static void read_env_version(void) {
    const char *v = getenv("EMU_HIP_RUNTIME_VERSION");
    char *end = NULL;
    long n = v != NULL ? strtol(v, &end, 10) : 0;
    env_version = end != NULL && end != v && *end == '\0' && n > 0 && n < 2000000000L
                      ? (int)n
                      : EMU_HIP_DEFAULT_VERSION;
}
static int default_version(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_env_version);
    return env_version;
}

hipError_t hipDriverGetVersion(int *driverVersion) {
    ENTER("hipDriverGetVersion");
    if (driverVersion == NULL) return hipErrorInvalidValue;
    *driverVersion = emuc_driver_version(default_version());
    return hipSuccess;
}

hipError_t hipRuntimeGetVersion(int *runtimeVersion) {
    ENTER("hipRuntimeGetVersion");
    if (runtimeVersion == NULL) return hipErrorInvalidValue;
    *runtimeVersion = emuc_driver_version(default_version());
    return hipSuccess;
}

const char *hipGetErrorName(hipError_t error) {
    emuc_enter("hipGetErrorName"); /* returns a string: a fault cannot be reported */
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) return errors[i].name;
    }
    return "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t error) {
    emuc_enter("hipGetErrorString");
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) return errors[i].text;
    }
    return "unknown error";
}

hipError_t hipGetDeviceCount(int *count) {
    ENTER("hipGetDeviceCount");
    if (count == NULL) return hipErrorInvalidValue;
    *count = emuc_device_count();
    return *count == 0 ? hipErrorNoDevice : hipSuccess;
}

hipError_t hipSetDevice(int deviceId) {
    ENTER("hipSetDevice");
    int n = emuc_device_count();
    if (n == 0) return hipErrorNoDevice;
    if (deviceId < 0 || deviceId >= n) return hipErrorInvalidDevice;
    current_dev = deviceId;
    return hipSuccess;
}

hipError_t hipGetDevice(int *deviceId) {
    ENTER("hipGetDevice");
    if (deviceId == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    *deviceId = dev;
    return hipSuccess;
}

/*
 * The current device's scheduling flags decide how a host thread waits for it:
 * hipDeviceScheduleBlockingSync sleeps; Spin spins on the core, Yield yields it between looks,
 * Auto (0, the default) yields as HIP documents (see wait_while in emu_core.c). The values are
 * EMU_SCHED_*'s. The other flag bits are accepted and ignored.
 */
#define HIP_DEVICE_SCHEDULE_MASK 0x7u

hipError_t hipSetDeviceFlags(unsigned int flags) {
    ENTER("hipSetDeviceFlags");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_set_sched(dev, (int)(flags & HIP_DEVICE_SCHEDULE_MASK)));
}

hipError_t hipGetDeviceFlags(unsigned int *flags) {
    ENTER("hipGetDeviceFlags");
    if (flags == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    int sched = 0;
    hipError_t rc = code(emuc_get_sched(dev, &sched));
    if (rc == hipSuccess) *flags = (unsigned)sched;
    return rc;
}

hipError_t hipDeviceSynchronize(void) {
    ENTER("hipDeviceSynchronize");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_device_synchronize(dev));
}

/* -- events ----------------------------------------------------------------------------- */

#define HIP_EVENT_DISABLE_TIMING 0x2u
#define HIP_EVENT_INTERPROCESS 0x4u
#define HIP_EVENT_FLAGS                                                                       \
    (0x1u | HIP_EVENT_DISABLE_TIMING | HIP_EVENT_INTERPROCESS | 0x20000000u | 0x40000000u |   \
     0x80000000u)

#define HIP_EVENT_BLOCKING_SYNC 0x1u

/* The creates' common body, after each entry point counted its own call. */
static hipError_t create_event(hipEvent_t *event, int timing, int blocking) {
    if (event == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    uint64_t h = 0;
    hipError_t rc = code(emuc_event_create(dev, timing, blocking, &h));
    if (rc == hipSuccess) *event = P(h);
    return rc;
}

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned int flags) {
    ENTER("hipEventCreateWithFlags");
    if ((flags & ~HIP_EVENT_FLAGS) != 0) return hipErrorInvalidValue;
    if ((flags & HIP_EVENT_INTERPROCESS) && !(flags & HIP_EVENT_DISABLE_TIMING)) {
        return hipErrorInvalidValue;
    }
    return create_event(event, !(flags & HIP_EVENT_DISABLE_TIMING),
                        (flags & HIP_EVENT_BLOCKING_SYNC) != 0);
}

hipError_t hipEventCreate(hipEvent_t *event) {
    ENTER("hipEventCreate");
    return create_event(event, 1, 0);
}

hipError_t hipEventDestroy(hipEvent_t event) {
    ENTER("hipEventDestroy");
    return code(emuc_event_destroy(H(event)));
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    ENTER("hipEventRecord");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_event_record(H(event), dev, stream_arg(stream), 0));
}

/*
 * hipEventRecordExternal (1) in a capture makes an event-record node, stamped at each launch,
 * from HIP 7 on; before, the runtime records it as hipEventRecord would, a dependency inside
 * the graph that nothing stamps (ROCm/rocm-systems#2380). The version is the one the runtime
 * reports (EMU_HIP_RUNTIME_VERSION, emu_set_driver_version). Outside a capture the flag is
 * refused, as CUDA refuses it.
 */
#define HIP_EVENT_RECORD_EXTERNAL 0x1u
#define HIP_STAMPS_EXTERNAL_RECORDS 70000000 /* HIP 7.0 */

hipError_t hipEventRecordWithFlags(hipEvent_t event, hipStream_t stream, unsigned int flags) {
    ENTER("hipEventRecordWithFlags");
    if ((flags & ~HIP_EVENT_RECORD_EXTERNAL) != 0) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    int capturing = 0;
    int external = flags != 0;
    if (external && emuc_driver_version(default_version()) < HIP_STAMPS_EXTERNAL_RECORDS &&
        emuc_stream_is_capturing(dev, stream_arg(stream), &capturing) == EMU_OK && capturing) {
        external = 0;
    }
    return code(emuc_event_record(H(event), dev, stream_arg(stream), external));
}

hipError_t hipEventSynchronize(hipEvent_t event) {
    ENTER("hipEventSynchronize");
    return code(emuc_event_synchronize(H(event)));
}

hipError_t hipEventQuery(hipEvent_t event) {
    ENTER("hipEventQuery");
    return code(emuc_event_query(H(event)));
}

hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop) {
    ENTER("hipEventElapsedTime");
    if (ms == NULL) return hipErrorInvalidValue;
    return code(emuc_event_elapsed(ms, H(start), H(stop)));
}

/* -- streams ---------------------------------------------------------------------------- */

static hipError_t create_stream(hipStream_t *stream, int non_blocking) {
    if (stream == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    uint64_t h = 0;
    hipError_t rc = code(emuc_stream_create(dev, non_blocking, &h));
    if (rc == hipSuccess) *stream = P(h);
    return rc;
}

/* -- memory and attributes -------------------------------------------------------------- */

hipError_t hipMalloc(void **ptr, size_t size) {
    ENTER("hipMalloc");
    if (ptr == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    if (size == 0) { /* HIP: nothing allocated, a null pointer, success */
        *ptr = NULL;
        return hipSuccess;
    }
    uint64_t p = 0;
    hipError_t rc = code(emuc_mem_alloc(dev, size, &p));
    if (rc == hipSuccess) *ptr = P(p);
    return rc;
}

hipError_t hipFree(void *ptr) {
    ENTER("hipFree");
    if (ptr == NULL) return hipSuccess;
    return code(emuc_mem_free(H(ptr)));
}

hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream) {
    ENTER("hipMemsetAsync");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_memset(dev, stream_arg(stream), H(dst), value & 0xff, sizeBytes));
}

/* The attributes the emulated devices report: the L2 cache size alone (hipDeviceAttribute_t's
 * hipDeviceAttributeL2CacheSize). */
enum { hipDeviceAttributeL2CacheSize = 19 };

hipError_t hipDeviceGetAttribute(int *pi, int attr, int deviceId) {
    ENTER("hipDeviceGetAttribute");
    if (pi == NULL) return hipErrorInvalidValue;
    int n = emuc_device_count();
    if (n == 0) return hipErrorNoDevice;
    if (deviceId < 0 || deviceId >= n) return hipErrorInvalidDevice;
    if (attr != hipDeviceAttributeL2CacheSize) return hipErrorInvalidValue;
    long long bytes = emuc_l2_cache_bytes();
    *pi = bytes > 0x7fffffffLL ? 0x7fffffff : (int)bytes;
    return hipSuccess;
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
    ENTER("hipStreamCreateWithFlags");
    if ((flags & ~1u) != 0) return hipErrorInvalidValue; /* hipStreamNonBlocking is 1 */
    return create_stream(stream, (flags & 1u) != 0);
}

hipError_t hipStreamCreate(hipStream_t *stream) {
    ENTER("hipStreamCreate");
    return create_stream(stream, 0);
}

hipError_t hipStreamDestroy(hipStream_t stream) {
    ENTER("hipStreamDestroy");
    if (stream_arg(stream) == EMU_STREAM_DEFAULT) return hipErrorInvalidHandle;
    return code(emuc_stream_destroy(H(stream)));
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
    ENTER("hipStreamWaitEvent");
    if (flags != 0) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_stream_wait_event(dev, stream_arg(stream), H(event)));
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
    ENTER("hipStreamSynchronize");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_stream_synchronize(dev, stream_arg(stream)));
}

hipError_t hipStreamQuery(hipStream_t stream) {
    ENTER("hipStreamQuery");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_stream_query(dev, stream_arg(stream)));
}

static hipError_t stream_is_capturing(hipStream_t stream, int *pCaptureStatus) {
    ENTER("hipStreamIsCapturing");
    if (pCaptureStatus == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_stream_is_capturing(dev, stream_arg(stream), pCaptureStatus));
}

/*
 * A failed call leaves the status unset in the real runtime: whatever the caller's memory
 * held. The emulation writes a value that no hipStreamCaptureStatus has, so that what a
 * binding makes of an unset status (hip-python raises ValueError converting it, and the
 * error code is lost) happens on every failure, not only when that memory held garbage.
 */
#define UNSET_CAPTURE_STATUS 0x5a5a5a5a

hipError_t hipStreamIsCapturing(hipStream_t stream, int *pCaptureStatus) {
    hipError_t status = stream_is_capturing(stream, pCaptureStatus);
    if (status != hipSuccess && pCaptureStatus != NULL) *pCaptureStatus = UNSET_CAPTURE_STATUS;
    return status;
}

hipError_t hipStreamBeginCapture(hipStream_t stream, int mode) {
    ENTER("hipStreamBeginCapture");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_stream_begin_capture(dev, stream_arg(stream), mode));
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph) {
    ENTER("hipStreamEndCapture");
    if (pGraph == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    uint64_t h = 0;
    hipError_t rc = code(emuc_stream_end_capture(dev, stream_arg(stream), &h));
    *pGraph = P(h);
    return rc;
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
    ENTER("hipGraphDestroy");
    return code(emuc_graph_destroy(H(graph)));
}

static hipError_t instantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph) {
    if (pGraphExec == NULL) return hipErrorInvalidValue;
    uint64_t h = 0;
    hipError_t rc = code(emuc_graph_instantiate(H(graph), &h));
    if (rc == hipSuccess) *pGraphExec = P(h);
    return rc;
}

hipError_t hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph,
                               hipGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize) {
    ENTER("hipGraphInstantiate");
    (void)pErrorNode, (void)pLogBuffer, (void)bufferSize; /* nothing fails to report there */
    return instantiate(pGraphExec, graph);
}

hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *pGraphExec, hipGraph_t graph,
                                        unsigned long long flags) {
    ENTER("hipGraphInstantiateWithFlags");
    (void)flags; /* no flag changes what the emulated graphs do */
    return instantiate(pGraphExec, graph);
}

hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream) {
    ENTER("hipGraphLaunch");
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_graph_launch(H(graphExec), dev, stream_arg(stream)));
}

hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec) {
    ENTER("hipGraphExecDestroy");
    return code(emuc_graph_exec_destroy(H(graphExec)));
}

hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData) {
    ENTER("hipLaunchHostFunc");
    if (fn == NULL) return hipErrorInvalidValue;
    int dev;
    NEED_DEVICE(dev);
    return code(emuc_launch_host_func(dev, stream_arg(stream), fn, userData));
}
