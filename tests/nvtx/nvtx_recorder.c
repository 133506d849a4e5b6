/* An NVTX injection library that records the ranges it receives (test support).
 *
 * NVTX (the instrumentation API Nsight Systems reads) loads the library named by
 * NVTX_INJECTION64_PATH at a process's first NVTX call and calls its
 * InitializeInjectionNvtx2, which fills NVTX's callback table: from then on each NVTX call of
 * the process lands here, as it would in a profiler. This one keeps, in call order, one line
 * per domain start/end range:
 *
 *     start <range id> <domain> <message>
 *     end <range id>
 *
 * and tests read them through nvtx_recorder_count() and nvtx_recorder_line(i), after opening
 * this same library with ctypes (dlopen returns the handle NVTX already holds).
 *
 * Only the part of the NVTX ABI it uses is declared here, as NVTX's headers define it
 * (nvToolsExt.h, nvtxDetail/nvtxTypes.h); the layouts are part of NVTX's stable ABI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../marker_lines.h"

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;
typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table, unsigned int *out_size);
} NvtxExportTableCallbacks;
typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t export_table_id);

enum { NVTX_ETID_CALLBACKS = 1 };
enum { NVTX_CB_MODULE_CORE2 = 5 };
enum {
    NVTX_CBID_CORE2_DomainRangeStartEx = 2,
    NVTX_CBID_CORE2_DomainRangeEnd = 3,
    NVTX_CBID_CORE2_DomainRegisterStringA = 10,
    NVTX_CBID_CORE2_DomainCreateA = 12,
};
enum { NVTX_MESSAGE_TYPE_ASCII = 1, NVTX_MESSAGE_TYPE_REGISTERED = 3 };

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    uint64_t payload;
    int32_t messageType;
    const void *message; /* a char* for ASCII; a handle (ours: a char*) for REGISTERED */
} nvtxEventAttributes_v2;

/* Domains and registered strings are handed out as copies of their names: a handle is then
 * the text itself. They live as long as the process, as NVTX's own do. */
typedef const char *Handle;

static Handle domain_create_a(const char *name) { return strdup(name ? name : ""); }

static Handle register_string_a(Handle domain, const char *text) {
    (void)domain;
    return strdup(text ? text : "");
}

static uint64_t range_start_ex(Handle domain, const nvtxEventAttributes_v2 *attributes) {
    const char *message = "";
    if (attributes && (attributes->messageType == NVTX_MESSAGE_TYPE_ASCII ||
                       attributes->messageType == NVTX_MESSAGE_TYPE_REGISTERED)) {
        message = attributes->message ? (const char *)attributes->message : "";
    }
    uint64_t id = new_range_id();
    char *line = NULL;
    if (asprintf(&line, "start %llu %s %s", (unsigned long long)id, domain ? domain : "",
                 message) >= 0) {
        record(line);
    }
    return id;
}

static void range_end(Handle domain, uint64_t id) {
    (void)domain;
    char *line = NULL;
    if (asprintf(&line, "end %llu", (unsigned long long)id) >= 0) {
        record(line);
    }
}

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const NvtxExportTableCallbacks *callbacks = get_export_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
        !table || size <= NVTX_CBID_CORE2_DomainCreateA) {
        return 0;
    }
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create_a;
    *table[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string_a;
    *table[NVTX_CBID_CORE2_DomainRangeStartEx] = (NvtxFunctionPointer)range_start_ex;
    *table[NVTX_CBID_CORE2_DomainRangeEnd] = (NvtxFunctionPointer)range_end;
    return 1;
}

MARKER_LINE_EXPORTS(nvtx_recorder)
