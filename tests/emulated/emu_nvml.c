/*
 * Emulated NVML (libnvidia-ml.so.1): the calls eventapi's cuda backend makes through
 * nvidia-ml-py (pynvml) to read a device's clocks, spelled with nvml.h's names, signatures and
 * return codes. pynvml opens the library by its soname and looks each function up by name on
 * first use, so plain exports are all it needs.
 *
 * Its devices are the emulated CUDA driver's: as many (EMU_DEVICE_COUNT, default 2), each with
 * the UUID and PCI bus id cuDeviceGetUuid and cuDeviceGetPCIBusId give for the same device
 * (emu_ids.h), listed in the reverse order of the CUDA ordinals, so that a device matched by
 * index instead of by UUID or bus id is the wrong one. A separate library with its own state:
 * it shares nothing with libcuda.so.1 but those identities.
 *
 * Each device's SM clock, its maximum and its clock event reasons (the throttle reasons) are
 * what a test sets: EMU_NVML_SM_MHZ (default 1980), EMU_NVML_MAX_SM_MHZ (default 1980) and
 * EMU_NVML_REASONS (a mask of nvmlClocksEventReason*, default 0), read at nvmlInit for every
 * device, or emu_nvml_set_clock for one device, named by its CUDA ordinal.
 */
#define _GNU_SOURCE
#include "emu_ids.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMU_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 16

typedef int nvmlReturn_t;
typedef int nvmlClockType_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_UNKNOWN = 999,
};

enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };

typedef struct emu_nvml_device {
    int ordinal; /* the CUDA ordinal of the same device */
    unsigned sm_mhz, max_sm_mhz;
    unsigned long long reasons;
} emu_nvml_device;

typedef emu_nvml_device *nvmlDevice_t;

static struct {
    pthread_mutex_t mu;
    int inits; /* nvmlInit calls not yet shut down */
    int count;
    emu_nvml_device devices[MAX_DEVICES]; /* by CUDA ordinal */
    long clock_reads;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static unsigned long long env_number(const char *name, unsigned long long fallback) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return fallback;
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 0);
    return end != NULL && *end == '\0' ? n : fallback;
}

static void read_env(void) {
    unsigned long long count = env_number("EMU_DEVICE_COUNT", 2);
    g.count = count <= MAX_DEVICES ? (int)count : 2;
    unsigned sm = (unsigned)env_number("EMU_NVML_SM_MHZ", 1980);
    unsigned max = (unsigned)env_number("EMU_NVML_MAX_SM_MHZ", 1980);
    unsigned long long reasons = env_number("EMU_NVML_REASONS", 0);
    for (int i = 0; i < MAX_DEVICES; i++) {
        g.devices[i] = (emu_nvml_device){i, sm, max, reasons};
    }
}

static void lock(void) {
    pthread_once(&g_once, read_env);
    pthread_mutex_lock(&g.mu);
}

static void unlock(void) { pthread_mutex_unlock(&g.mu); }

/* The device behind a handle, or NULL for one that is not (g.mu held). */
static emu_nvml_device *device_of(nvmlDevice_t handle) {
    for (int i = 0; i < g.count; i++) {
        if (handle == &g.devices[i]) return handle;
    }
    return NULL;
}

/* Device `ordinal`'s UUID as NVML writes it: "GPU-" and the 16 bytes as 8-4-4-4-12 hex. */
static void uuid_text(int ordinal, char out[64]) {
    unsigned char b[16];
    emu_device_uuid(ordinal, b);
    snprintf(out, 64,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

EMU_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    lock();
    g.inits++;
    unlock();
    return NVML_SUCCESS;
}

EMU_EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EMU_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EMU_EXPORT nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    if (g.inits == 0) rc = NVML_ERROR_UNINITIALIZED;
    else g.inits--;
    unlock();
    return rc;
}

EMU_EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

/* Every device call needs nvmlInit first; `rc` is set to why not (g.mu held). */
#define NEED_INIT(rc)                                                                         \
    do {                                                                                      \
        if (g.inits == 0) (rc) = NVML_ERROR_UNINITIALIZED;                                    \
    } while (0)

EMU_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    if (rc == NVML_SUCCESS) *count = (unsigned)g.count;
    unlock();
    return rc;
}

/* NVML's index i is CUDA's ordinal count - 1 - i. */
EMU_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    if (rc == NVML_SUCCESS && index >= (unsigned)g.count) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) *device = &g.devices[g.count - 1 - (int)index];
    unlock();
    return rc;
}

EMU_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    if (rc == NVML_SUCCESS) {
        rc = NVML_ERROR_NOT_FOUND;
        for (int i = 0; i < g.count; i++) {
            char text[64];
            uuid_text(i, text);
            if (strcmp(text, uuid) == 0) {
                *device = &g.devices[i];
                rc = NVML_SUCCESS;
            }
        }
    }
    unlock();
    return rc;
}

/* "domain:bus:device.function" or "bus:device.function", in hex, as NVML takes them. */
EMU_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    if (bus_id == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4 &&
        sscanf(bus_id, "%x:%x.%x", &bus, &dev, &fn) != 3) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    if (rc == NVML_SUCCESS) {
        rc = NVML_ERROR_NOT_FOUND;
        for (int i = 0; i < g.count; i++) {
            if (domain == 0 && dev == 0 && fn == 0 && bus == (unsigned)emu_device_pci_bus(i)) {
                *device = &g.devices[i];
                rc = NVML_SUCCESS;
            }
        }
    }
    unlock();
    return rc;
}

EMU_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (uuid == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    emu_nvml_device *d = rc == NVML_SUCCESS ? device_of(device) : NULL;
    if (rc == NVML_SUCCESS && d == NULL) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        char text[64];
        uuid_text(d->ordinal, text);
        if (strlen(text) + 1 > length) rc = NVML_ERROR_INSUFFICIENT_SIZE;
        else memcpy(uuid, text, strlen(text) + 1);
    }
    unlock();
    return rc;
}

EMU_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (name == NULL || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    emu_nvml_device *d = rc == NVML_SUCCESS ? device_of(device) : NULL;
    if (rc == NVML_SUCCESS && d == NULL) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) snprintf(name, length, "Emulated CUDA Device %d", d->ordinal);
    unlock();
    return rc;
}

/* The SM clock (graphics reads the same); the others are not emulated. */
static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock,
                             int max) {
    if (clock == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    emu_nvml_device *d = rc == NVML_SUCCESS ? device_of(device) : NULL;
    if (rc == NVML_SUCCESS && d == NULL) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && type != NVML_CLOCK_SM && type != NVML_CLOCK_GRAPHICS) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    }
    if (rc == NVML_SUCCESS) {
        *clock = max ? d->max_sm_mhz : d->sm_mhz;
        g.clock_reads += !max;
    }
    unlock();
    return rc;
}

EMU_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                               unsigned int *clock) {
    return clock_of(device, type, clock, 0);
}

EMU_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                  unsigned int *clock) {
    return clock_of(device, type, clock, 1);
}

EMU_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                               unsigned long long *reasons) {
    if (reasons == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    lock();
    NEED_INIT(rc);
    emu_nvml_device *d = rc == NVML_SUCCESS ? device_of(device) : NULL;
    if (rc == NVML_SUCCESS && d == NULL) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) *reasons = d->reasons;
    unlock();
    return rc;
}

/* The name before NVML 12.2 renamed it. */
EMU_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                  unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

/* -- control API ---------------------------------------------------------------------------- */

/* Set the device of CUDA ordinal `ordinal`: its SM clock (0 keeps it) and its reasons mask.
 * Returns 0, or -1 for an ordinal out of range. */
EMU_EXPORT int emu_nvml_set_clock(int ordinal, unsigned sm_mhz, unsigned long long reasons) {
    if (ordinal < 0 || ordinal >= MAX_DEVICES) return -1;
    lock();
    if (sm_mhz != 0) g.devices[ordinal].sm_mhz = sm_mhz;
    g.devices[ordinal].reasons = reasons;
    unlock();
    return 0;
}

/* How many times a device's current clock was read. */
EMU_EXPORT long emu_nvml_clock_reads(void) {
    lock();
    long n = g.clock_reads;
    unlock();
    return n;
}
